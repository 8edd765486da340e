"""scikit-learn estimators whose labels never leave the server.

:class:`WalrClassifier` trains a logistic regression label-blind from one
WALR release (the noisy label-weighted mean of the features), exactly as
``dpgate-client train`` does; :class:`ServerLogisticRegression` releases a
model trained on the server by one of its private learners. Both predict
through the model file (``dpgate._native.logits``, the CLI's code, the
feature map included), and save and load the CLI's model file, so a model
scores the same here, in ``dpgate-client evaluate`` and in ``dpgate-client
predict``.

``fit`` takes no labels: they stay on the server. ``score(X, y)`` (the
accuracy) is for a caller who holds labelled rows of their own, e.g.
public holdout data.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import Tags
from sklearn.utils.validation import check_is_fitted

from . import _native
from .client import Client, DatasetRef, ReleaseRef, _id
from .errors import DpgateError
from .model_files import load_model, save_model
from .progress import TrainingBars
from .records import Dataset, Release, dumps

__all__ = ["ServerLogisticRegression", "WalrClassifier"]

_Model = TypeVar("_Model", bound="_ModelFileClassifier")

#: The column (or pandas index) that names each row of supplied features.
ROW_ID = "row_id"

_LABELS_STAY = (
    "labels stay on the server: fit takes none (y must be None); "
    "score(X, y) is where labels of your own are used"
)


def _is_polars(x: Any) -> bool:
    """Whether ``x`` is a polars frame (without importing polars, which is
    optional)."""
    return type(x).__module__.split(".")[0] == "polars"


def _feature_matrix(x: Any, names: Sequence[str]) -> npt.NDArray[np.float64]:
    """Rows × features as float64 in the order of ``names``: a pandas or
    polars frame's columns are picked by name (in any order, others
    ignored); an array is taken as is and must have one column per name."""
    if isinstance(x, pd.DataFrame) or _is_polars(x):
        missing = [name for name in names if name not in x.columns]
        if missing:
            raise ValueError(
                f"X has no column {missing[0]!r} (the model's features: {list(names)})"
            )
        matrix = (
            x[list(names)].to_numpy() if isinstance(x, pd.DataFrame) else x.select(names).to_numpy()
        )
    else:
        matrix = np.asarray(x)
    matrix = np.ascontiguousarray(matrix, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"X must be 2-D (rows × features), not {matrix.ndim}-D")
    if matrix.shape[1] != len(names):
        raise ValueError(
            f"X has {matrix.shape[1]} features, but the model was fitted with {len(names)}"
        )
    return matrix


def _supplied_features(
    x: Any, row_ids: Sequence[Any] | None
) -> tuple[list[str], list[str], npt.NDArray[np.float64]]:
    """The analyst's own features as ``NativeClient.train`` takes them:
    (row ids, names, rows × features in raw units).

    Row ids come from ``row_ids``, else a ``row_id`` column or a pandas
    index named ``row_id``. A frame's other columns are the features, by
    name; an array's are named ``x0``, ``x1``, … as scikit-learn names
    unnamed features."""
    ids: Any = row_ids
    if isinstance(x, pd.DataFrame) or _is_polars(x):
        if ROW_ID in x.columns:
            ids = x[ROW_ID] if ids is None else ids
            x = x.drop(columns=ROW_ID) if isinstance(x, pd.DataFrame) else x.drop(ROW_ID)
        elif isinstance(x, pd.DataFrame) and x.index.name == ROW_ID and ids is None:
            ids = x.index
        names = [str(name) for name in x.columns]
    else:
        names = [f"x{index}" for index in range(np.shape(x)[1] if np.ndim(x) == 2 else 0)]
    if ids is None:
        raise ValueError(
            "supplied features need their rows' ids: pass row_ids, or X with a "
            "'row_id' column (or a pandas index named 'row_id')"
        )
    matrix = _feature_matrix(x, names)
    ids = [str(row_id) for row_id in ids]
    if len(ids) != matrix.shape[0]:
        raise ValueError(f"{len(ids)} row ids for {matrix.shape[0]} rows of X")
    return ids, names, matrix


class _ModelFileClassifier(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """What the estimators share: a fitted model is a model file (the CLI's),
    and every prediction goes through ``dpgate._native.logits``.

    Fitted attributes:
        model_: The model file (a dict): ``weights``, ``intercept``,
            ``feature_names``, ``label``, ``dataset_id``, ``release_id``,
            ``kind``, ``epsilon``, ``delta``, and for a label-blind model
            ``training`` and (trained on a feature map) ``map``.
        coef_: ``weights`` as an array of shape (1, n_features). On a model
            trained on a feature map they weigh v(scale(x)), not the raw
            features: read them with the map, and predict with the methods
            here, which apply it.
        intercept_: Shape (1,).
        classes_: ``[0, 1]``.
        n_features_in_: The number of features.
        feature_names_in_: Their names, the columns a frame ``X`` must have.
        release_: The release the model was made from (None after
            :meth:`load`: its id is ``model_["release_id"]``).
    """

    client: Client | None
    dataset: DatasetRef | None

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        # fit takes no y: the labels stay on the server.
        tags.target_tags.required = False
        # Every fit is a fresh private release with fresh noise.
        tags.non_deterministic = True
        return tags

    def _client(self) -> Client:
        """The client to fit with: the one given, else one from the
        environment (DPGATE_URL, DPGATE_TOKEN)."""
        return self.client if self.client is not None else Client()

    def _dataset_id(self) -> str:
        if self.dataset is None:
            raise ValueError(f"{type(self).__name__} needs a dataset (its id) to fit")
        return _id(self.dataset)

    def _fitted(self, model: dict[str, Any], release: Release | None) -> None:
        """Sets the fitted attributes from a model file."""
        self.model_ = model
        self.coef_ = np.asarray(self.model_["weights"], dtype=np.float64).reshape(1, -1)
        self.intercept_ = np.asarray([self.model_["intercept"]], dtype=np.float64)
        self.classes_ = np.array([0, 1])
        self.feature_names_in_ = np.asarray(self.model_["feature_names"], dtype=object)
        self.n_features_in_ = len(self.feature_names_in_)
        self.release_ = release

    def decision_function(self, X: Any) -> npt.NDArray[np.float64]:
        """The log-odds of label 1 for each row of ``X`` (raw units): a
        pandas or polars frame with the model's features as columns (by
        name, any order), or an array with them in ``feature_names_in_``
        order. Through the model's feature map when it has one."""
        check_is_fitted(self)
        matrix = _feature_matrix(X, list(self.feature_names_in_))
        return _native.logits(dumps(self.model_), matrix)

    def predict_proba(self, X: Any) -> npt.NDArray[np.float64]:
        """Shape (n, 2): the probabilities of labels 0 and 1."""
        positive = expit(self.decision_function(X))
        return np.column_stack([1.0 - positive, positive])

    def predict(self, X: Any) -> npt.NDArray[np.int64]:
        """1 where the probability of label 1 is at least one half (as
        ``dpgate-client predict``), else 0."""
        positive: npt.NDArray[np.float64] = expit(self.decision_function(X))
        return (positive >= 0.5).astype(np.int64)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the model file exactly as ``dpgate-client`` does, for
        ``dpgate-client evaluate``/``predict`` or :meth:`load`."""
        check_is_fitted(self)
        save_model(self.model_, path)

    @classmethod
    def load(
        cls: type[_Model], path: str | os.PathLike[str], client: Client | None = None
    ) -> _Model:
        """A fitted estimator of a model file (written by :meth:`save` or by
        ``dpgate-client train``/``release … --out``), checked as the CLI
        checks it. ``client`` (and the file's dataset) are kept for a
        later ``fit``."""
        model = load_model(path)
        estimator = cls(client=client, dataset=model["dataset_id"])
        estimator._fitted(model, None)
        return estimator


class WalrClassifier(_ModelFileClassifier):
    """Label-blind logistic regression from one WALR release, as
    ``dpgate-client train``.

    The features are the dataset's (downloaded: its privacy unit must be
    ``label``) or the caller's own (``fit(X, row_ids=…)``, supplied to the
    release); one ``walr`` release at (ε, δ), or at ``target_sigma``, or
    one made earlier (``release``); then minibatch gradient descent on
    the features against the release, locally. The same plan and release
    give bit-identical weights here and in the CLI.

    Args:
        client: The server; default a :class:`dpgate.Client` from the
            environment at ``fit``.
        dataset: The dataset (its id).
        epsilon: The release's ε; or give ``target_sigma``, or ``release``.
        delta: The release's δ (required for a new release: WALR is
            Gaussian).
        map: The release's public feature map: ``"auto"`` (the default and
            the best), ``"centre"``, ``"none"``, or None for the server's
            default. Ignored with ``release`` (its own map is used).
        target_sigma: Accuracy first: the largest noise std to accept on
            each released number; the server spends the least ε that meets
            it.
        release: Train from this earlier ``walr`` release (its id) instead
            of a new one: nothing is spent.
        epochs: Most passes over the rows; default, as many as make 10,000
            minibatch steps.
        batch_size: Rows per minibatch.
        learning_rate: The initial step; default 1/L from the data's
            curvature bound.
        decay: The step at epoch e is learning_rate / (1 + decay·e).
        l2: The L2 term (l2/2)·‖θ‖².
        tolerance: Stop once an epoch moves θ by less than this (relative).
        seed: Seeds the minibatch shuffles.
        idempotency_key: Reuse a key to get the same release back on a
            retried fit (a new fit with the key spends nothing more).
        progress: Progress bars: None (on a terminal), True or False.
    """

    def __init__(
        self,
        client: Client | None = None,
        dataset: DatasetRef | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        map: str | None = "auto",
        target_sigma: float | None = None,
        release: ReleaseRef | None = None,
        epochs: int | None = None,
        batch_size: int = 1024,
        learning_rate: float | None = None,
        decay: float = 0.1,
        l2: float = 0.0,
        tolerance: float = 1e-6,
        seed: int = 0,
        idempotency_key: str | None = None,
        progress: bool | None = None,
    ) -> None:
        self.client = client
        self.dataset = dataset
        self.epsilon = epsilon
        self.delta = delta
        self.map = map
        self.target_sigma = target_sigma
        self.release = release
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.decay = decay
        self.l2 = l2
        self.tolerance = tolerance
        self.seed = seed
        self.idempotency_key = idempotency_key
        self.progress = progress

    def _plan(self) -> dict[str, Any]:
        """The JSON TrainPlan, refused (before anything is read or spent) as
        ``dpgate-client train`` refuses its flags."""
        prices = [self.epsilon, self.target_sigma, self.release]
        if sum(price is not None for price in prices) != 1:
            raise ValueError("give exactly one of epsilon, target_sigma and release")
        plan: dict[str, Any] = {"dataset": self._dataset_id()}
        if self.release is not None:
            if self.delta is not None or self.idempotency_key is not None:
                raise ValueError(
                    "release reuses an earlier release: delta and idempotency_key are its own"
                )
            plan["release"] = _id(self.release)
        else:
            if self.delta is None:
                raise ValueError("a new WALR release needs delta (WALR is Gaussian: δ > 0)")
            plan.update(
                {
                    name: value
                    for name, value in {
                        "epsilon": self.epsilon,
                        "target_sigma": self.target_sigma,
                        "delta": self.delta,
                        "map": self.map,
                        "idempotency_key": self.idempotency_key,
                    }.items()
                    if value is not None
                }
            )
        config = {
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "decay": self.decay,
            "l2": self.l2,
            "tolerance": self.tolerance,
            "seed": self.seed,
        }
        plan["config"] = {name: value for name, value in config.items() if value is not None}
        return plan

    def fit(
        self, X: Any = None, y: None = None, row_ids: Sequence[Any] | None = None
    ) -> WalrClassifier:
        """Makes the release (or reads ``release``) and trains.

        Args:
            X: None to train on the dataset's own features (downloaded);
                or the analyst's own features in raw units (a pandas or
                polars frame, whose columns name them, or an array, whose
                columns are named x0, x1, …), supplied to the release, so
                the server sums the labels against exactly these vectors.
                Each feature is scaled by its observed range in X.
            y: Must be None: the labels stay on the server.
            row_ids: The dataset's row id of each row of X (or a ``row_id``
                column, or a pandas index named ``row_id``).

        Returns:
            self, fitted.
        """
        if y is not None:
            raise ValueError(_LABELS_STAY)
        plan = self._plan()
        features = None if X is None else _supplied_features(X, row_ids)
        bars = TrainingBars(self.progress)
        try:
            model, release = self._client()._native.train(dumps(plan), features, bars)
        finally:
            bars.close()
        self._fitted(json.loads(model), Release.from_json(release))
        return self


class ServerLogisticRegression(_ModelFileClassifier):
    """A logistic regression trained on the server by one of its private
    learners, released as a model (its weights are the release's).

    Args:
        client: The server; default a :class:`dpgate.Client` from the
            environment at ``fit``.
        dataset: The dataset (its id).
        kind: ``"model/dp-gd"`` (the default), ``"model/dp-sgd"``,
            ``"model/output-perturbation"``, ``"model/objective-perturbation"``
            or ``"model/frank-wolfe"`` (a linear model of the label).
        epsilon: The release's ε.
        delta: The release's δ (``model/dp-gd`` requires one;
            ``model/dp-sgd`` and ``model/objective-perturbation`` are pure ε).
        params: The kind's other parameters, named as in its JSON (e.g.
            ``{"steps": 100, "clip": 1.0}`` for ``model/dp-gd``;
            ``{"lambda": "auto"}`` for output perturbation; ``{"target":
            "label", "radius": 1.0}`` for Frank-Wolfe).
        idempotency_key: Reuse a key to get the same release back on a
            retried fit.
    """

    def __init__(
        self,
        client: Client | None = None,
        dataset: DatasetRef | None = None,
        kind: str = "model/dp-gd",
        epsilon: float | None = None,
        delta: float | None = None,
        params: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        self.client = client
        self.dataset = dataset
        self.kind = kind
        self.epsilon = epsilon
        self.delta = delta
        self.params = params
        self.idempotency_key = idempotency_key

    def fit(self, X: None = None, y: None = None) -> ServerLogisticRegression:
        """Makes the release and reads its model.

        Args:
            X: Must be None: the server trains on the dataset's stored rows.
            y: Must be None: the labels stay on the server.

        Returns:
            self, fitted.
        """
        if y is not None:
            raise ValueError(_LABELS_STAY)
        if X is not None:
            raise ValueError(
                "server-side learners train on the dataset's stored rows: X must be None"
            )
        if not self.kind.startswith("model/"):
            raise ValueError(f"kind {self.kind!r} releases no model: use a model/… kind")
        client = self._client()
        dataset: Dataset = client.dataset(self._dataset_id())
        release = client.release(
            dataset,
            self.kind,
            self.epsilon,
            self.delta,
            idempotency_key=self.idempotency_key,
            **dict(self.params or {}),
        )
        model = _native.model_of_release(dataset.to_json(), release.to_json())
        if model is None:
            raise DpgateError(f"release {release.id} ({release.kind}) came back without a model")
        self._fitted(json.loads(model), release)
        return self
