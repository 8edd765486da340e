"""The Rust half of the package (the dpgate-client crate through PyO3).

Private: the public API is in :mod:`dpgate`. Requests and answers cross
as the API's JSON text, so the Rust client's types check every field;
ids cross as strings. Every call releases the GIL while it waits, and a
Ctrl-C (KeyboardInterrupt) cancels it. A failed call raises what
``dpgate.errors._native_error(kind, message, problem, status)`` returns:
``kind`` is ``"problem"`` (``problem`` holds the problem document's
JSON), ``"transport"`` (the request did not complete), ``"unexpected"``
(an answer the client does not understand; ``status`` is its HTTP
status), ``"invalid"`` (bad arguments, e.g. a malformed id or JSON) or
``"failed"`` (anything else: a trainer that diverged, a model file that
does not fit the rows, I/O).
"""

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

class NativeClient:
    """A connection to one dpgate server (``dpgate_client::Client``):
    idempotent calls are retried, and every release carries an
    ``Idempotency-Key`` so a retry never spends twice."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        connect_timeout: float = 10.0,
        timeout: float = 330.0,
    ) -> None: ...
    @property
    def url(self) -> str: ...
    def with_token(self, token: str) -> NativeClient: ...
    def health(self) -> None: ...
    def datasets(self) -> str:
        """JSON list of Dataset."""
    def dataset(self, id: str) -> str:
        """JSON Dataset."""
    def create_dataset(self, request: str, background: bool = False) -> str:
        """``request``: JSON CreateDataset. JSON Dataset, or with
        ``background`` (a ``source`` registered in the background) the
        JSON Registration."""
    def upload_rows(self, id: str, format: str, body: bytes) -> str:
        """``format``: ``"csv"``, ``"ndjson"``, ``"arrow"`` (an Arrow IPC
        stream) or ``"parquet"``. JSON IngestReport."""
    def register_rows(self, id: str, source: str, background: bool = False) -> str:
        """``source``: JSON Source. JSON IngestReport, or with
        ``background`` the JSON Registration."""
    def registration(self, id: str) -> str:
        """JSON Registration."""
    def registered(self, id: str, poll: float = 1.0) -> str:
        """Waits for a registration: JSON IngestReport."""
    def release(
        self,
        id: str,
        request: str,
        dry_run: bool = False,
        idempotency_key: str | None = None,
    ) -> tuple[str, bool]:
        """``request``: JSON ReleaseRequest (``epsilon``, ``delta``,
        ``kind`` and the kind's parameters). (JSON Release, replayed)."""
    def get_release(self, id: str, release: str) -> str: ...
    def releases_page(
        self,
        id: str,
        analyst: str | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> str:
        """JSON ReleaseList."""
    def gradient_call(self, id: str, release: str, call: str) -> str:
        """``call``: JSON GradientCall. JSON GradientCallResult."""
    def change_budget(self, id: str, change: str) -> str:
        """``change``: JSON BudgetChange. JSON Dataset."""
    def features(
        self,
        id: str,
        format: str = "arrow",
        progress: Callable[[int], None] | None = None,
    ) -> bytes:
        """The feature export, whole: an Arrow IPC stream (``"arrow"``)
        or CSV text (``"csv"``). ``progress`` gets the bytes received so
        far."""
    def metrics(self) -> str: ...
    def ledger(self, id: str) -> str:
        """JSON list of every LedgerEntry, following pages."""
    def ledger_page(self, id: str, after: int | None = None, limit: int | None = None) -> str:
        """JSON LedgerPage."""
    def verify_ledger(self, id: str) -> str:
        """JSON LedgerVerification."""
    def privacy_profile(self, id: str, deltas: Sequence[float] = ()) -> str:
        """JSON PrivacyProfile."""
    def train(
        self,
        plan: str,
        features: tuple[Sequence[str], Sequence[str], npt.NDArray[np.float64]] | None = None,
        progress: Callable[[str, int, int | None, str | None], None] | None = None,
    ) -> tuple[str, str]:
        """``dpgate-client train``'s flow (``dpgate_client::walr_training``).

        ``plan``: JSON TrainPlan: ``dataset``, ``epsilon`` or
        ``target_sigma``, ``delta``, ``map`` (absent: the server's
        default), ``release`` (train from it instead of a new release),
        ``idempotency_key``, ``features_format`` (``"arrow"``/``"csv"``)
        and ``config`` (``epochs``, ``batch_size``, ``learning_rate``,
        ``decay``, ``l2``, ``tolerance``, ``seed``; each optional).
        ``features``: the analyst's own (row ids, feature names, rows ×
        features in raw units), supplied to the release; absent, the
        dataset's from the server. ``progress(stage, done, total,
        message)`` with stage ``"features"`` (bytes), ``"release"`` (0 when
        asked, 1 when answered), ``"train"`` (epochs; ``total`` the most
        that will run; ``message`` the loss) and ``"done"``.

        Returns (the model file's JSON, the release's JSON)."""

def logits(model: str, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The model file's log-odds of each row of ``x`` (rows × features, in
    the model's ``feature_names`` order, raw units), through its feature
    map when it has one."""

def load_model(path: str) -> str:
    """A model file's JSON, checked."""

def save_model(model: str, path: str) -> None:
    """Writes a model file exactly as ``dpgate-client`` does."""

def model_of_release(dataset: str, release: str) -> str | None:
    """The model file of a server-side model release (``dataset``: its
    JSON Dataset; ``release``: its JSON Release), as ``release model
    --out`` saves it; None for a release without a model."""

def evaluate(model: str, data: str, label: str | None = None) -> str:
    """``dpgate-client evaluate`` on the CSV file ``data``: JSON
    Evaluation (rows, positive_rate, auc, log_loss, accuracy,
    expected_calibration_error, calibration)."""

def predict(model: str, data: str, out: str) -> int:
    """``dpgate-client predict``: scores the CSV file ``data`` into the
    CSV file ``out``; returns the rows scored."""
