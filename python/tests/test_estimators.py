"""The scikit-learn estimators: scikit-learn's own checks that apply to an
estimator without labels, fits against a real server, and round trips of
the model file through ``dpgate-client``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest
from conftest import FEATURES, LABEL, ROWS, Labelled, Server
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.metrics import accuracy_score, roc_auc_score
from sklearn.utils.estimator_checks import (
    check_do_not_raise_errors_in_init_or_set_params,
    check_estimator_cloneable,
    check_estimator_repr,
    check_estimator_tags_renamed,
    check_estimators_unfitted,
    check_get_params_invariance,
    check_mixin_order,
    check_no_attributes_set_in_init,
    check_parameters_default_constructible,
    check_set_params,
    check_valid_tag_types,
)
from sklearn.utils.validation import check_is_fitted

import dpgate

FEATURE_NAMES = [name for name, *_ in FEATURES]

# The checks of sklearn.utils.estimator_checks that apply to an estimator
# whose labels stay on the server. The others (check_fit2d_*,
# check_classifiers_train, check_estimators_dtypes, check_n_features_in,
# check_fit_check_is_fitted, check_estimators_pickle,
# check_dont_overwrite_parameters, check_fit_idempotent, …) fit on labelled
# data they generate, (X, y), which these estimators cannot take: fit has
# no y, and trains on a dataset stored on the server. What those checks
# check of a fitted estimator is checked below after real fits.
CHECKS = [
    check_parameters_default_constructible,
    check_no_attributes_set_in_init,
    check_get_params_invariance,
    check_set_params,
    check_estimators_unfitted,
    check_estimator_repr,
    check_estimator_cloneable,
    check_valid_tag_types,
    check_estimator_tags_renamed,
    check_mixin_order,
    check_do_not_raise_errors_in_init_or_set_params,
]

ESTIMATORS = [dpgate.WalrClassifier(), dpgate.ServerLogisticRegression()]


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda estimator: type(estimator).__name__)
@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
def test_scikit_learn_checks(estimator: Any, check: Any) -> None:
    check(type(estimator).__name__, estimator)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda estimator: type(estimator).__name__)
def test_a_clone_shares_the_client_and_keeps_the_token_out_of_the_repr(estimator: Any) -> None:
    client = dpgate.Client("http://127.0.0.1:9", "secret-token")
    configured = clone(estimator).set_params(client=client, dataset="some-dataset", epsilon=0.5)
    copy = clone(configured)
    assert copy.client is client and copy.get_params()["dataset"] == "some-dataset"
    assert "secret-token" not in repr(copy) and "epsilon=0.5" in repr(copy)


def test_labels_are_refused() -> None:
    with pytest.raises(ValueError, match="labels stay on the server"):
        dpgate.WalrClassifier(dataset="d", epsilon=1, delta=1e-6).fit(np.zeros((2, 1)), [0, 1])
    with pytest.raises(ValueError, match="labels stay on the server"):
        dpgate.ServerLogisticRegression(dataset="d", epsilon=1).fit(None, [0, 1])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"delta": 1e-6}, "exactly one of epsilon, target_sigma and release"),
        ({"epsilon": 1, "target_sigma": 0.01, "delta": 1e-6}, "exactly one"),
        ({"epsilon": 1}, "needs delta"),
        ({"release": "r", "delta": 1e-6}, "delta and idempotency_key are its own"),
    ],
)
def test_a_plan_the_cli_would_refuse_is_refused_before_sending(
    params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        dpgate.WalrClassifier(dataset="d", **params).fit()


def test_predicting_before_fit_is_not_fitted() -> None:
    with pytest.raises(NotFittedError):
        dpgate.WalrClassifier().predict(np.zeros((1, 4)))


def auc(estimator: Any, holdout: pd.DataFrame) -> float:
    return float(roc_auc_score(holdout[LABEL], estimator.predict_proba(holdout)[:, 1]))


def check_fitted(estimator: Any, holdout: pd.DataFrame) -> None:
    """What scikit-learn's fitted checks ask of a classifier."""
    check_is_fitted(estimator)
    k = len(FEATURES)
    assert estimator.coef_.shape == (1, k) and estimator.coef_.dtype == np.float64
    assert estimator.intercept_.shape == (1,)
    assert list(estimator.classes_) == [0, 1]
    assert estimator.n_features_in_ == k
    assert list(estimator.feature_names_in_) == FEATURE_NAMES
    n = len(holdout)
    proba = estimator.predict_proba(holdout)
    assert proba.shape == (n, 2) and proba.dtype == np.float64
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    predicted = estimator.predict(holdout)
    assert predicted.shape == (n,) and set(np.unique(predicted)) <= {0, 1}
    assert np.array_equal(predicted, (proba[:, 1] >= 0.5).astype(int))
    logits = estimator.decision_function(holdout)
    assert logits.shape == (n,) and logits.dtype == np.float64
    # Columns by name in any order; an array in feature_names_in_ order;
    # polars as pandas; the number of features checked.
    shuffled = holdout[[LABEL, *reversed(FEATURE_NAMES)]]
    assert np.array_equal(estimator.decision_function(shuffled), logits)
    assert np.array_equal(estimator.decision_function(holdout[FEATURE_NAMES].to_numpy()), logits)
    assert np.array_equal(estimator.decision_function(pl.from_pandas(holdout)), logits)
    with pytest.raises(ValueError, match="features"):
        estimator.predict(holdout[FEATURE_NAMES[:-1]].to_numpy())
    with pytest.raises(ValueError, match="no column"):
        estimator.predict(holdout[FEATURE_NAMES[:-1]])
    assert estimator.score(holdout, holdout[LABEL]) == accuracy_score(holdout[LABEL], predicted)


@pytest.fixture(scope="session")
def walr(labelled: Labelled) -> dpgate.WalrClassifier:
    """A WalrClassifier fitted on the server's features at ε = 1 (map
    auto, the default)."""
    return dpgate.WalrClassifier(
        labelled.analyst, labelled.dataset, epsilon=1.0, delta=1e-6, progress=False
    ).fit()


def test_walr_on_the_servers_features(walr: dpgate.WalrClassifier, labelled: Labelled) -> None:
    check_fitted(walr, labelled.holdout)
    model = walr.model_
    assert model["map"]["feature_map"]["name"] == "auto"
    assert model["training"]["rows"] == ROWS and not model["training"]["supplied_features"]
    assert walr.release_ is not None and walr.release_.id == model["release_id"]
    assert walr.release_.kind == "walr" and walr.release_.epsilon == 1.0
    assert auc(walr, labelled.holdout) > 0.7


def test_walr_on_supplied_features(labelled: Labelled) -> None:
    own = labelled.rows.set_index("row_id")[FEATURE_NAMES]  # the index names the rows
    fitted = dpgate.WalrClassifier(
        labelled.analyst, labelled.dataset, epsilon=1.0, delta=1e-6, progress=False
    ).fit(own)
    check_fitted(fitted, labelled.holdout)
    assert fitted.model_["training"]["supplied_features"] and fitted.release_.n == ROWS
    assert auc(fitted, labelled.holdout) > 0.7
    # An array, with its row ids: features named as scikit-learn names them.
    half = labelled.rows.iloc[: ROWS // 2]
    unnamed = dpgate.WalrClassifier(
        labelled.analyst,
        labelled.dataset,
        target_sigma=0.05,
        delta=1e-6,
        map="centre",
        progress=False,
    ).fit(half[FEATURE_NAMES].to_numpy(), row_ids=half["row_id"])
    assert list(unnamed.feature_names_in_) == ["x0", "x1", "x2", "x3"]
    assert (
        unnamed.release_.n == ROWS // 2 and unnamed.model_["map"]["feature_map"]["name"] == "centre"
    )
    with pytest.raises(ValueError, match="need their rows. ids"):
        unnamed.fit(half[FEATURE_NAMES].to_numpy())


def test_server_logistic_regression(labelled: Labelled, tmp_path: Path) -> None:
    fitted = dpgate.ServerLogisticRegression(
        labelled.analyst, labelled.dataset, epsilon=1.0, delta=1e-6, params={"steps": 50}
    ).fit()
    check_fitted(fitted, labelled.holdout)
    assert fitted.model_["kind"] == "model/dp-gd" and "map" not in fitted.model_
    assert fitted.release_.result.weights == fitted.model_["weights"]
    assert auc(fitted, labelled.holdout) > 0.6
    fitted.save(tmp_path / "server.json")
    loaded = dpgate.ServerLogisticRegression.load(tmp_path / "server.json")
    assert np.array_equal(
        loaded.predict_proba(labelled.holdout), fitted.predict_proba(labelled.holdout)
    )
    with pytest.raises(ValueError, match="releases no model"):
        dpgate.ServerLogisticRegression(
            labelled.analyst, labelled.dataset, kind="walr", epsilon=1
        ).fit()


def cli(binary: Path, server: Server, labelled: Labelled, *arguments: str) -> str:
    """``dpgate-client --json …`` as the analyst; its standard output."""
    env = {**os.environ, "DPGATE_URL": server.url, "DPGATE_TOKEN": labelled.analyst_token}
    done = subprocess.run(
        [str(binary), "--json", *arguments], check=False, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def test_a_saved_model_evaluates_the_same_in_the_cli_and_back(
    walr: dpgate.WalrClassifier,
    server: Server,
    labelled: Labelled,
    client_binary: Path,
    tmp_path: Path,
) -> None:
    path = tmp_path / "model.json"
    walr.save(path)
    evaluation = json.loads(
        cli(
            client_binary,
            server,
            labelled,
            "evaluate",
            "--model",
            str(path),
            "--data",
            str(labelled.holdout_csv),
        )
    )
    assert dpgate.evaluate(path, labelled.holdout_csv).to_dict() == evaluation
    assert dpgate.evaluate(walr, labelled.holdout_csv).to_dict() == evaluation
    assert evaluation["auc"] == pytest.approx(auc(walr, labelled.holdout), abs=1e-12)
    assert evaluation["accuracy"] == walr.score(labelled.holdout, labelled.holdout[LABEL])
    back = dpgate.WalrClassifier.load(path)
    assert back.model_ == walr.model_ and back.release_ is None
    assert back.get_params()["dataset"] == labelled.dataset.id
    assert auc(back, labelled.holdout) == auc(walr, labelled.holdout)


def test_the_cli_and_python_train_the_same_weights_from_one_release(
    walr: dpgate.WalrClassifier,
    server: Server,
    labelled: Labelled,
    client_binary: Path,
    tmp_path: Path,
) -> None:
    release = walr.release_
    assert release is not None
    path = tmp_path / "cli.json"
    cli(
        client_binary,
        server,
        labelled,
        "train",
        "--dataset",
        labelled.dataset.id,
        "--release",
        str(release.id),
        "--seed",
        "0",
        "--out",
        str(path),
    )
    from_cli = dpgate.load_model(path)
    again = dpgate.WalrClassifier(
        labelled.analyst, labelled.dataset, release=release, progress=False
    ).fit()
    for model in (again.model_, walr.model_):
        assert model["weights"] == from_cli["weights"]  # bit for bit
        assert model["intercept"] == from_cli["intercept"]
        assert model["map"] == from_cli["map"]
    assert again.release_ == release  # read back, not made again
    loaded = dpgate.WalrClassifier.load(path)
    assert np.array_equal(
        loaded.decision_function(labelled.holdout), walr.decision_function(labelled.holdout)
    )


def test_a_saved_model_predicts_the_same_in_the_cli(
    walr: dpgate.WalrClassifier,
    server: Server,
    labelled: Labelled,
    client_binary: Path,
    tmp_path: Path,
) -> None:
    path = tmp_path / "model.json"
    walr.save(path)
    out = tmp_path / "scores.csv"
    cli(
        client_binary,
        server,
        labelled,
        "predict",
        "--model",
        str(path),
        "--data",
        str(labelled.holdout_csv),
        "--out",
        str(out),
    )
    scores = pd.read_csv(out)
    assert list(scores.columns) == ["row_id", "probability", "predicted"]
    assert list(scores["row_id"]) == list(labelled.holdout["row_id"])
    np.testing.assert_allclose(
        scores["probability"], walr.predict_proba(labelled.holdout)[:, 1], rtol=1e-12, atol=0
    )
    assert np.array_equal(scores["predicted"], walr.predict(labelled.holdout))
    from_python = tmp_path / "python-scores.csv"
    assert dpgate.predict(walr, labelled.holdout_csv, from_python) == len(labelled.holdout)
    assert from_python.read_bytes() == out.read_bytes()


def test_progress_bars_when_asked_for(
    walr: dpgate.WalrClassifier, labelled: Labelled, capsys: pytest.CaptureFixture[str]
) -> None:
    dpgate.WalrClassifier(
        labelled.analyst, labelled.dataset, release=walr.release_, progress=True
    ).fit()
    drawn = capsys.readouterr().err
    assert "features" in drawn and "release" in drawn and "training" in drawn and "loss" in drawn
    labelled.analyst.features(labelled.dataset, progress=True)
    assert "features" in capsys.readouterr().err
    # The default: no bars off a terminal.
    dpgate.WalrClassifier(labelled.analyst, labelled.dataset, release=walr.release_).fit()
    assert capsys.readouterr().err == ""
