"""Model files, as ``dpgate-client`` reads and writes them: load, save,
``evaluate`` and ``predict``, through the CLI's own code.

Wherever a model is taken it may be a path to a model file, the model
file's dict, or a fitted estimator of :mod:`dpgate.estimators`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Protocol, Union

from . import _native
from .records import Evaluation, dumps

__all__ = ["FittedModel", "ModelSource", "evaluate", "load_model", "predict", "save_model"]


class FittedModel(Protocol):
    """A fitted estimator of :mod:`dpgate.estimators`: its model file is
    ``model_``."""

    model_: dict[str, Any]


ModelSource = Union[str, "os.PathLike[str]", Mapping[str, Any], FittedModel]
"""A model: a model file's path, its dict, or a fitted estimator."""


def _model_json(model: ModelSource) -> str:
    """The JSON text of a model given in any of its forms."""
    if isinstance(model, (str, os.PathLike)):
        return _native.load_model(os.fspath(model))
    fitted = getattr(model, "model_", model)
    if isinstance(fitted, Mapping):
        return dumps(fitted)
    raise TypeError(
        "a model is a model file's path, its dict or a fitted estimator, "
        f"not {type(model).__name__}"
    )


def load_model(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A model file as a dict, checked as the CLI checks it (bounds or a
    map that do not fit the weights are refused)."""
    loaded: dict[str, Any] = json.loads(_native.load_model(os.fspath(path)))
    return loaded


def save_model(model: ModelSource, path: str | os.PathLike[str]) -> None:
    """Writes a model file exactly as ``dpgate-client`` does."""
    _native.save_model(_model_json(model), os.fspath(path))


def evaluate(
    model: ModelSource, data: str | os.PathLike[str], label: str | None = None
) -> Evaluation:
    """``dpgate-client evaluate``: AUC, log loss, accuracy at 0.5 and a
    10-bin calibration table of ``model`` on the labelled CSV file
    ``data`` (the model's features found by column name, through its
    feature map; ``label`` defaults to the model's label column)."""
    return Evaluation.from_json(_native.evaluate(_model_json(model), os.fspath(data), label))


def predict(model: ModelSource, data: str | os.PathLike[str], out: str | os.PathLike[str]) -> int:
    """``dpgate-client predict``: scores the rows of the CSV file ``data``
    into the CSV file ``out`` (``row_id`` when the data has it,
    ``probability`` of label 1, ``predicted`` 0/1); returns the rows
    scored."""
    return _native.predict(_model_json(model), os.fspath(data), os.fspath(out))
