"""The API client: every call of the Rust client, answers as records and
data frames.

Keyword names are the API's JSON fields (openapi.yaml), so a request reads
as its JSON does: ``client.release(ds, "walr", epsilon=1, delta=1e-6,
map="auto")`` sends ``{"kind": "walr", "epsilon": 1, "delta": 1e-6, "map":
"auto"}``. Wherever a dataset or a release is named, its id or the record
itself will do.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from . import _native
from .frames import Frame, Output, aggregate_frame, arrow_stream, ledger_frame, to_output
from .progress import DownloadBar
from .records import (
    Dataset,
    GradientCallResult,
    IngestReport,
    LedgerVerification,
    PrivacyProfile,
    Registration,
    Release,
    ReleaseSummary,
    dumps,
)

if TYPE_CHECKING:
    import polars as pl

__all__ = ["DEFAULT_URL", "Client", "DatasetRef", "ReleaseRef"]

DEFAULT_URL = "http://127.0.0.1:8080"
"""The server a client talks to when neither ``url`` nor ``DPGATE_URL``
names one (``dpgate serve``'s default address)."""

DatasetRef = str | uuid.UUID | Dataset
"""A dataset: its id, or the dataset itself."""

ReleaseRef = str | uuid.UUID | Release
"""A release: its id, or the release itself."""

#: Upload formats by file suffix.
_FORMATS = {
    ".csv": "csv",
    ".ndjson": "ndjson",
    ".jsonl": "ndjson",
    ".arrow": "arrow",
    ".arrows": "arrow",
    ".parquet": "parquet",
}


def _id(ref: DatasetRef | ReleaseRef) -> str:
    """The id of a dataset or release, given as itself or its id."""
    if isinstance(ref, (Dataset, Release)):
        if ref.id is None:
            raise ValueError("this release has no id: a dry run, or public numbers not recorded")
        return str(ref.id)
    return str(ref)


def _present(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields that are set: a JSON field left out takes the API's
    default, which ``null`` does not always."""
    return {name: value for name, value in fields.items() if value is not None}


class Client:
    """A connection to one dpgate server.

    Args:
        url: The server's base URL; default ``DPGATE_URL``, else
            ``http://127.0.0.1:8080``.
        token: The bearer token; default ``DPGATE_TOKEN`` (none if unset).
        connect_timeout: Seconds to open a connection.
        timeout: Seconds a try of a request may take; above the server's
            own 5-minute limit, so that its ``timeout`` answer comes first.

    Idempotent calls are retried on a dropped connection or a 429, 502,
    503 or 504, and every release carries an idempotency key (the caller's
    or a fresh one), so a retry never spends twice. Failures raise
    :class:`dpgate.DpgateError` subclasses carrying the problem document.

    A client is shared, not copied: ``copy.deepcopy`` (as scikit-learn's
    ``clone`` does to an estimator's parameters) returns it. Pickled, it
    keeps its URL and timeouts but never its token: unpickled, it takes
    ``DPGATE_TOKEN``, so a pickled estimator does not carry a credential.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        connect_timeout: float = 10.0,
        timeout: float = 330.0,
    ) -> None:
        url = url or os.environ.get("DPGATE_URL") or DEFAULT_URL
        token = token if token is not None else os.environ.get("DPGATE_TOKEN") or None
        self._native = _native.NativeClient(url, token, connect_timeout, timeout)
        self._timeouts = (connect_timeout, timeout)

    @classmethod
    def _of(cls, native: _native.NativeClient, timeouts: tuple[float, float]) -> Client:
        client = cls.__new__(cls)
        client._native = native
        client._timeouts = timeouts
        return client

    @property
    def url(self) -> str:
        """The server's base URL."""
        return self._native.url

    def __repr__(self) -> str:
        # Never the token: a repr ends up in logs and notebooks.
        return f"Client({self.url!r})"

    def __deepcopy__(self, memo: dict[int, Any]) -> Client:
        return self

    def __copy__(self) -> Client:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        connect_timeout, timeout = self._timeouts
        return (_unpickled_client, (self.url, connect_timeout, timeout))

    def with_token(self, token: str) -> Client:
        """The same server with another token."""
        return Client._of(self._native.with_token(token), self._timeouts)

    # Datasets --------------------------------------------------------

    def health(self) -> None:
        """Checks that the server and its database answer (raises if not)."""
        self._native.health()

    def datasets(self) -> list[Dataset]:
        """The datasets the caller may see: all for admins, the granted ones
        for analysts."""
        return [Dataset(item) for item in json.loads(self._native.datasets())]

    def dataset(self, dataset: DatasetRef) -> Dataset:
        """One dataset, with N, its budget spent and remaining, and
        per-analyst spending."""
        return Dataset.from_json(self._native.dataset(_id(dataset)))

    def create_dataset(
        self,
        name: str,
        *,
        privacy_unit: str,
        features: Sequence[Mapping[str, Any]],
        label: str,
        budget: Mapping[str, float],
        measures: Sequence[Mapping[str, Any]] | None = None,
        dimensions: Sequence[Mapping[str, Any]] | None = None,
        accountant: str | None = None,
        source: Mapping[str, str] | str | None = None,
        background: bool = False,
        user_column: str | None = None,
        max_rows_per_user: int | None = None,
        max_groups_per_user: int | None = None,
        max_rows_per_group_per_user: int | None = None,
    ) -> Dataset | Registration:
        """Creates a dataset (admins): ``POST /v1/datasets``.

        Args:
            name: Unique among the server's datasets.
            privacy_unit: ``"label"`` (labels and measures private; features,
                dimensions and N public), ``"row"`` (the whole row private) or
                ``"user"`` (all rows of one person private, N too).
            features: ``[{"name": "f0", "min": 0, "max": 1}, …]``, the
                public bounds of each feature.
            label: The 0/1 label column.
            budget: ``{"epsilon": …, "delta": …}``, the total budget.
            measures: Numeric columns with bounds, like ``features``.
            dimensions: ``[{"name": "campaign", "values": ["a", "b"]}, …]``.
            accountant: ``"rdp"`` (the server's default) or ``"basic"``.
            source: Parquet files to register in place as the first version
                (``"file:///dir/"``, ``"s3://bucket/prefix/"`` or
                ``{"uri": …}``) instead of uploading rows.
            background: With a ``source``, register it in the background and
                return the :class:`Registration` at once (see
                :meth:`registered`).
            user_column: Unit ``user``: the column naming each row's person.
            max_rows_per_user: Unit ``user``: rows of one person a release
                reads at most (required by the unit).
            max_groups_per_user: Unit ``user``: groups of an aggregate one
                person contributes to at most.
            max_rows_per_group_per_user: Unit ``user``: rows of one person in
                one group at most.

        Returns:
            The dataset, or with ``background`` its registration.
        """
        request = _present(
            {
                "name": name,
                "privacy_unit": privacy_unit,
                "features": features,
                "label": label,
                "budget": budget,
                "measures": measures,
                "dimensions": dimensions,
                "accountant": accountant,
                "source": {"uri": source} if isinstance(source, str) else source,
                "user_column": user_column,
                "max_rows_per_user": max_rows_per_user,
                "max_groups_per_user": max_groups_per_user,
                "max_rows_per_group_per_user": max_rows_per_group_per_user,
            }
        )
        answer = self._native.create_dataset(dumps(request), background)
        return Registration.from_json(answer) if background else Dataset.from_json(answer)

    def upload_rows(
        self,
        dataset: DatasetRef,
        data: bytes
        | str
        | os.PathLike[str]
        | pd.DataFrame
        | pl.DataFrame
        | pa.Table
        | pa.RecordBatch,
        format: str | None = None,
    ) -> IngestReport:
        """Appends rows to a dataset (admins), all or nothing.

        Args:
            dataset: The dataset.
            data: The rows, with a ``row_id`` column, the label, and every
                feature, measure and dimension: bytes (CSV unless
                ``format`` says otherwise); a path (its format from the
                suffix: .csv, .ndjson/.jsonl, .arrow/.arrows, .parquet); a
                pandas or polars DataFrame (sent as CSV); or a pyarrow Table
                or RecordBatch (sent as an Arrow IPC stream).
            format: ``"csv"``, ``"ndjson"``, ``"arrow"`` or ``"parquet"``;
                overrides what ``data`` implies.

        Returns:
            The rows added and the dataset's N after them.
        """
        body, implied = _upload_body(data)
        report = self._native.upload_rows(_id(dataset), format or implied, body)
        return IngestReport.from_json(report)

    def register_rows(
        self,
        dataset: DatasetRef,
        source: Mapping[str, str] | str,
        *,
        background: bool = False,
    ) -> IngestReport | Registration:
        """Registers Parquet files in place as the dataset's next version
        (admins; under the operator's ``DPGATE_DATA_ROOTS``).

        ``source`` is a URI or ``{"uri": …}``. With ``background``, returns
        the :class:`Registration` at once (see :meth:`registered`).
        """
        request = dumps({"uri": source} if isinstance(source, str) else source)
        answer = self._native.register_rows(_id(dataset), request, background)
        return Registration.from_json(answer) if background else IngestReport.from_json(answer)

    def registration(self, registration: str) -> Registration:
        """Where a background registration stands."""
        return Registration.from_json(self._native.registration(registration))

    def registered(self, registration: str, poll: float = 1.0) -> IngestReport:
        """Waits for a background registration, polling every ``poll``
        seconds; its report, or the error it failed with."""
        return IngestReport.from_json(self._native.registered(registration, poll))

    def change_budget(
        self,
        dataset: DatasetRef,
        *,
        budget: Mapping[str, float] | None = None,
        caps: Mapping[str, Mapping[str, float] | None] | None = None,
    ) -> Dataset:
        """Sets the dataset's total budget (never below what is spent) and
        caps on single analysts (admins).

        Args:
            budget: The new total, ``{"epsilon": …, "delta": …}``.
            caps: Per analyst (token subject), a cap like ``budget``, or
                None to remove the analyst's cap.

        Returns:
            The dataset with its new budget and caps.
        """
        change = _present({"budget": budget, "caps": caps})
        return Dataset.from_json(self._native.change_budget(_id(dataset), dumps(change)))

    def features(
        self,
        dataset: DatasetRef,
        output: Output = "pandas",
        *,
        progress: bool | None = None,
    ) -> Frame:
        """The dataset's feature table, one row per stored row, in stored
        order: ``row_id`` and each feature (float32, in the units it was
        uploaded in). Only for datasets whose privacy unit is ``label``
        (else :class:`dpgate.FeaturesNotPublic`).

        Downloaded as an Arrow IPC stream and read without a copy;
        ``output="arrow"`` returns that table itself, ``"pandas"`` (the
        default, as every table of this client) or ``"polars"`` converts
        it. ``progress`` shows the bytes received (default: on a terminal).
        """
        bar = DownloadBar("features", progress)
        try:
            data = self._native.features(_id(dataset), "arrow", bar)
        finally:
            bar.close()
        return to_output(arrow_stream(data), output)

    # Releases --------------------------------------------------------

    def release(
        self,
        dataset: DatasetRef,
        kind: str,
        epsilon: float | None = None,
        delta: float | None = None,
        *,
        dry_run: bool = False,
        idempotency_key: str | None = None,
        **params: Any,
    ) -> Release:
        """Makes a release of any kind: ``{"kind": kind, "epsilon": …,
        "delta": …, **params}`` (fields left None are left out, so they take
        the API's defaults).

        Args:
            dataset: The dataset.
            kind: ``walr``, ``aggregate``, ``model/output-perturbation``,
                ``model/objective-perturbation``, ``model/dp-gd``,
                ``model/dp-sgd``, ``model/frank-wolfe`` or ``gradient``.
            epsilon: The ε to spend (or a kind's accuracy target in
                ``params``: ``target_sigma``, ``target_std``).
            delta: δ (omitted: pure ε, where the kind allows it).
            dry_run: Price it (sensitivity, σ, what it would spend) without
                spending anything: the answer has no ``result`` and no id.
            idempotency_key: Makes retries safe: the same key and body return
                the stored release (``replayed`` True) and spend nothing;
                another body with the key is a :class:`dpgate.Conflict`.
            **params: The kind's parameters, named as in its JSON
                (numpy arrays and numbers are accepted).

        Returns:
            The release.
        """
        request = _present({"kind": kind, "epsilon": epsilon, "delta": delta, **params})
        answer, replayed = self._native.release(
            _id(dataset), dumps(request), dry_run, idempotency_key
        )
        return Release(json.loads(answer), replayed)

    def aggregate(
        self,
        dataset: DatasetRef,
        statistics: Sequence[str],
        group_by: Sequence[str] | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        target_std: float | None = None,
        mechanism: str | None = None,
        *,
        idempotency_key: str | None = None,
        output: Output = "pandas",
    ) -> Frame:
        """Counts, sums and means, by group: an ``aggregate`` release as a
        table, one row per group and statistic.

        Args:
            dataset: The dataset.
            statistics: ``count``, ``sum:COLUMN`` or ``mean:COLUMN`` (COLUMN
                the label or a measure).
            group_by: Declared dimensions; every combination of their
                declared values is a group, present in the data or not.
            epsilon: The ε to spend, or give ``target_std``.
            delta: δ; omitted (or with ``mechanism="laplace"``), pure ε.
            target_std: Accuracy first: the largest noise std to accept on
                every number; the server spends the least ε that meets it.
            mechanism: ``"gaussian"`` (the default) or ``"laplace"``.
            idempotency_key: As for :meth:`release`.
            output: ``"pandas"`` (default), ``"polars"`` or ``"arrow"``.

        Returns:
            Columns: one per ``group_by`` dimension, then ``statistic``,
            ``value``, ``std`` (of the noise; 0 when exact) and ``exact``
            (the statistic is public under the privacy unit). To price the
            release first, ``client.release(dataset, "aggregate", …,
            dry_run=True)`` with the same keywords; to keep the release
            (its id, ε spent), make it with :meth:`release` and turn it
            into a table with :func:`dpgate.aggregate_frame`.
        """
        release = self.release(
            dataset,
            "aggregate",
            epsilon,
            delta,
            idempotency_key=idempotency_key,
            statistics=list(statistics),
            group_by=list(group_by) if group_by is not None else None,
            target_std=target_std,
            mechanism=mechanism,
        )
        return aggregate_frame(release, group_by, output)

    def get_release(self, dataset: DatasetRef, release: ReleaseRef) -> Release:
        """A stored release (admins see every release, analysts their own)."""
        return Release.from_json(self._native.get_release(_id(dataset), _id(release)))

    def releases(self, dataset: DatasetRef, analyst: str | None = None) -> list[ReleaseSummary]:
        """The dataset's releases, oldest first, every page of them: all for
        admins (or one ``analyst``'s), the caller's own for an analyst."""
        summaries: list[ReleaseSummary] = []
        after: int | None = None
        while True:
            page = json.loads(self._native.releases_page(_id(dataset), analyst, after))
            summaries.extend(ReleaseSummary(item) for item in page["releases"])
            after = page.get("next_after")
            if after is None:
                return summaries

    def gradient_call(
        self, dataset: DatasetRef, release: ReleaseRef, call: int, theta: Sequence[float]
    ) -> GradientCallResult:
        """Call ``call`` (0 … T − 1) of a pre-paid gradient session at
        ``theta``: nothing more is debited; a retry at the same ``theta``
        gets the stored answer."""
        request = dumps({"call": call, "theta": theta})
        answer = self._native.gradient_call(_id(dataset), _id(release), request)
        return GradientCallResult.from_json(answer)

    # Ledger ----------------------------------------------------------

    def ledger(self, dataset: DatasetRef) -> pd.DataFrame:
        """The dataset's whole hash-chained ledger (admins), oldest first,
        as a pandas frame: ``seq``, ``event``, ``actor``, ``epsilon``,
        ``delta``, ``release_id``, ``created_at`` (UTC), ``budget_after``,
        ``spent_after``, ``details``, ``loss``, ``prev_hash``, ``hash``,
        ``dataset_id``."""
        return ledger_frame(json.loads(self._native.ledger(_id(dataset))))

    def verify_ledger(self, dataset: DatasetRef) -> LedgerVerification:
        """Walks the whole ledger chain (admins): every hash and link, and
        the running spending against what the entries add up to."""
        return LedgerVerification.from_json(self._native.verify_ledger(_id(dataset)))

    def privacy_profile(self, dataset: DatasetRef, deltas: Sequence[float] = ()) -> PrivacyProfile:
        """ε at each δ of ``deltas`` (default: 10⁻¹² to 10⁻¹ by decades and
        the budget's δ) for the releases so far: the whole ledger for
        admins, the caller's own releases for an analyst."""
        return PrivacyProfile.from_json(self._native.privacy_profile(_id(dataset), list(deltas)))

    def metrics(self) -> str:
        """``GET /metrics``: the Prometheus text of a server's metrics
        listener (point the client at ``DPGATE_METRICS_ADDR``)."""
        return self._native.metrics()


def _unpickled_client(url: str, connect_timeout: float, timeout: float) -> Client:
    """A pickled client, with the token of the environment (see
    :class:`Client`)."""
    return Client(url, connect_timeout=connect_timeout, timeout=timeout)


def _upload_body(data: Any) -> tuple[bytes, str]:
    """The bytes of an upload and the format they imply."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), "csv"
    if isinstance(data, (str, os.PathLike)):
        path = Path(data)
        return path.read_bytes(), _FORMATS.get(path.suffix.lower(), "csv")
    if isinstance(data, pd.DataFrame):
        return data.to_csv(index=False).encode(), "csv"
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue().to_pybytes(), "arrow"
    if type(data).__module__.split(".")[0] == "polars":
        return data.write_csv().encode(), "csv"
    raise TypeError(
        "upload bytes, a path, a pandas or polars DataFrame or a pyarrow Table, "
        f"not {type(data).__name__}"
    )
