"""dpgate from Python: a differentially private measurement service's
client, label-blind training and scikit-learn estimators.

The package wraps the Rust client crate (``dpgate._native``), so its
retries and idempotency keys, the label-blind trainer, the feature maps
and the model file are the same code as the ``dpgate-client`` CLI's.

Example::

    import dpgate

    client = dpgate.Client()  # from DPGATE_URL and DPGATE_TOKEN
    dataset = client.datasets()[0]
    client.aggregate(dataset, ["count", "mean:value"], group_by=["campaign"], epsilon=0.5)
    model = dpgate.WalrClassifier(client, dataset, epsilon=1.0, delta=1e-6).fit()
    model.predict_proba(holdout[model.feature_names_in_])
"""

from importlib.metadata import PackageNotFoundError, version

from .client import DEFAULT_URL, Client
from .errors import (
    BudgetExhausted,
    Conflict,
    DpgateError,
    FeaturesNotPublic,
    Forbidden,
    InternalError,
    InvalidArgument,
    InvalidInput,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    ReleaseFailed,
    ServerTimeout,
    TransportError,
    Unauthorized,
    UnexpectedResponse,
    UnsupportedMediaType,
)
from .estimators import ServerLogisticRegression, WalrClassifier
from .frames import aggregate_frame
from .model_files import evaluate, load_model, predict, save_model
from .records import Dataset, Evaluation, Record, Release

try:
    __version__ = version("dpgate")
except PackageNotFoundError:  # imported from a source tree, not installed
    __version__ = "0+unknown"

__all__ = [
    "DEFAULT_URL",
    "BudgetExhausted",
    "Client",
    "Conflict",
    "Dataset",
    "DpgateError",
    "Evaluation",
    "FeaturesNotPublic",
    "Forbidden",
    "InternalError",
    "InvalidArgument",
    "InvalidInput",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "Record",
    "Release",
    "ReleaseFailed",
    "ServerLogisticRegression",
    "ServerTimeout",
    "TransportError",
    "Unauthorized",
    "UnexpectedResponse",
    "UnsupportedMediaType",
    "WalrClassifier",
    "__version__",
    "aggregate_frame",
    "evaluate",
    "load_model",
    "predict",
    "save_model",
]
