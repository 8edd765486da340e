"""Read-only views of the API's JSON objects, fields as attributes.

A :class:`Record` wraps one JSON object: ``dataset.budget.epsilon`` reads
``{"budget": {"epsilon": …}}``. The subclasses below name the fields of the
API's schemas (openapi.yaml) with their types, for editors and type
checkers, and wrap their nested objects in the right subclass; a field the
server adds later is read all the same (a nested object of it as a plain
:class:`Record`). An optional field the answer leaves out reads as
``None``. ``to_dict()`` gives the JSON object itself.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "AnalystSpend",
    "BoundedColumn",
    "Budget",
    "CalibrationBin",
    "ContributionBounds",
    "Dataset",
    "Dimension",
    "Evaluation",
    "GradientCallResult",
    "IngestReport",
    "LedgerVerification",
    "NoiseDetails",
    "PrivacyProfile",
    "ProfilePoint",
    "Record",
    "Registration",
    "Release",
    "ReleaseSummary",
    "Remaining",
    "Spent",
]


_R = TypeVar("_R", bound="Record")


class Record:
    """One JSON object of the API, read-only, its fields as attributes (and
    by ``record["field"]``). Two records are equal when their JSON is."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_data", dict(data))

    @classmethod
    def from_json(cls: type[_R], text: str) -> _R:
        """The record of a JSON text."""
        return cls(json.loads(text))

    def __getattr__(self, name: str) -> Any:
        # Private and dunder names are never fields: answering them would
        # confuse copy, pickle and the like, which probe for such names.
        if name.startswith("_"):
            raise AttributeError(name)
        converters = _converters(type(self))
        try:
            value = self._data[name]
        except KeyError:
            if name in converters:
                return None
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None
        return converters.get(name, _wrap)(value)

    def __getitem__(self, name: str) -> Any:
        try:
            return getattr(self, name)
        except AttributeError:
            raise KeyError(name) from None

    def __contains__(self, name: object) -> bool:
        return name in self._data

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Record):
            return bool(self._data == other._data)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal by a mutable dict's content

    def __dir__(self) -> list[str]:
        # The fields too, so that a notebook completes them.
        return sorted(set(super().__dir__()) | set(self._data))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self._data.items())
        return f"{type(self).__name__}({fields})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._data,))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (a deep copy: the record stays as it was)."""
        return typing.cast(dict[str, Any], json.loads(self.to_json()))

    def to_json(self) -> str:
        """The JSON text of the object."""
        return dumps(self._data)


def _wrap(value: Any) -> Any:
    """A JSON value with its objects as plain records."""
    if isinstance(value, dict):
        return Record(value)
    if isinstance(value, list):
        return [_wrap(item) for item in value]
    return value


def _converter(hint: Any) -> Callable[[Any], Any]:
    """How to present a JSON value whose field is annotated ``hint``."""
    if isinstance(hint, type) and issubclass(hint, Record):
        return lambda value: hint(value) if isinstance(value, dict) else value
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is list:
        item = _converter(arguments[0])
        return lambda value: [item(v) for v in value] if isinstance(value, list) else value
    if origin is dict:
        entry = _converter(arguments[1])
        return lambda value: (
            {k: entry(v) for k, v in value.items()} if isinstance(value, dict) else value
        )
    if origin in (typing.Union, types.UnionType):
        present = [argument for argument in arguments if argument is not type(None)]
        return _converter(present[0]) if len(present) == 1 else _wrap
    if hint in (str, int, float, bool):
        return lambda value: value
    return _wrap


#: The converters of each record class, made on its first read.
_CONVERTERS: dict[type, dict[str, Callable[[Any], Any]]] = {}


def _converters(cls: type) -> dict[str, Callable[[Any], Any]]:
    """The annotated fields of a record class and how to present each."""
    if cls not in _CONVERTERS:
        hints = typing.get_type_hints(cls)
        _CONVERTERS[cls] = {
            name: _converter(hint) for name, hint in hints.items() if not name.startswith("_")
        }
    return _CONVERTERS[cls]


def _jsonable(value: Any) -> Any:
    """What ``json`` cannot encode by itself: numpy arrays and numbers,
    and records."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Record):
        return value._data
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dumps(value: Any) -> str:
    """The API's JSON text of ``value`` (numpy arrays and numbers as JSON
    numbers; NaN and infinities refused, as the API refuses them)."""
    return json.dumps(value, default=_jsonable, allow_nan=False)


class Budget(Record):
    """An (ε, δ) pair: a budget, or what it is measured against."""

    epsilon: float
    delta: float


class Spent(Record):
    """What a dataset has spent, rounded up: under its accountant and,
    for comparison, under basic composition."""

    epsilon: float
    delta: float
    epsilon_basic: float
    delta_basic: float


class Remaining(Record):
    """What a dataset has left under its accountant."""

    epsilon: float
    delta: float


class BoundedColumn(Record):
    """A numeric column with declared public bounds (a feature or a
    measure)."""

    name: str
    min: float
    max: float


class Dimension(Record):
    """A categorical column with its declared, public list of values."""

    name: str
    values: list[str]


class AnalystSpend(Record):
    """An analyst's own spending on a dataset, and its cap if it has one."""

    analyst: str
    spent: Spent
    cap: Budget | None


class ContributionBounds(Record):
    """Unit ``user``: the public bounds on what one person contributes to a
    release."""

    max_rows_per_user: int
    max_groups_per_user: int
    max_rows_per_group_per_user: int


class Dataset(Record):
    """A dataset: metadata, schema, N and the budget. Under unit ``user`` N
    is private: ``n_rows`` is ``None`` for an analyst."""

    id: str
    name: str
    n_rows: int | None
    privacy_unit: str
    user_column: str | None
    contribution_bounds: ContributionBounds | None
    accountant: str
    features: list[BoundedColumn]
    label: str
    measures: list[BoundedColumn]
    dimensions: list[Dimension]
    budget: Budget
    spent: Spent
    remaining: Remaining
    created_at: str
    analysts: list[AnalystSpend] | None


class IngestReport(Record):
    """The outcome of an accepted upload or registration."""

    rows_added: int
    n_rows: int


class Registration(Record):
    """Where a registration of Parquet files in place stands: ``state`` is
    ``running``, ``done`` (with ``report``) or ``failed`` (with
    ``problem``)."""

    id: str
    dataset_id: str
    state: str
    created_at: str
    finished_at: str | None
    report: IngestReport | None
    problem: Record | None


class NoiseDetails(Record):
    """The noise behind a release, for auditing and error bars (its
    ``lambda``, a Python keyword, reads as ``noise["lambda"]``)."""

    mechanism: str
    scale: float
    grid: float
    accounted_sensitivity: float
    sigma_classic: float | None


class Release(Record):
    """A release. ``result`` holds the released numbers of its kind (absent
    on a dry run); ``replayed`` says whether the server returned a stored
    release for a retried idempotency key (it is not part of the JSON, so
    a replay equals the original). ``n`` is ``None`` under privacy unit
    ``user``, where N is private."""

    __slots__ = ("_replayed",)

    id: str | None
    kind: str
    epsilon: float
    delta: float
    sensitivity: float
    sigma: float
    n: int | None
    noise: NoiseDetails
    result: Record | None
    spent: Spent
    remaining: Remaining
    analyst: str
    created_at: str
    dry_run: bool

    def __init__(self, data: Mapping[str, Any], replayed: bool = False) -> None:
        super().__init__(data)
        object.__setattr__(self, "_replayed", replayed)

    @property
    def replayed(self) -> bool:
        """True when the server answered a retried idempotency key with the
        stored release (HTTP 200) instead of making a new one."""
        return bool(self._replayed)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._data, self._replayed))


class ReleaseSummary(Record):
    """One line of a release listing."""

    id: str
    kind: str
    analyst: str
    epsilon: float
    delta: float
    seq: int
    created_at: str


class GradientCallResult(Record):
    """The gradient of one call of a pre-paid gradient session."""

    call: int
    gradient: list[float]
    remaining: int


class LedgerVerification(Record):
    """The whole ledger chain walked: ``intact``, or where it ``break``-s
    (read it as ``verification["break"]``, a Python keyword)."""

    intact: bool
    entries: int


class ProfilePoint(Record):
    """The ledger is (ε, δ)-DP; ``epsilon`` is None where the accountant
    claims no finite ε at this δ."""

    delta: float
    epsilon: float | None


class PrivacyProfile(Record):
    """ε as a function of δ for the ledger so far, under the dataset's
    accountant."""

    accountant: str
    analyst: str | None
    releases: int
    points: list[ProfilePoint]


class CalibrationBin(Record):
    """One reliability-diagram bin of an evaluation."""

    lower: float
    upper: float
    count: int
    mean_predicted: float
    observed_rate: float


class Evaluation(Record):
    """How well a model predicts labelled rows (``dpgate-client evaluate``):
    ``auc`` is None when only one class is present."""

    rows: int
    positive_rate: float
    auc: float | None
    log_loss: float
    accuracy: float
    expected_calibration_error: float
    calibration: list[CalibrationBin]
