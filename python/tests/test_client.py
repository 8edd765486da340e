"""The client against a real server: records, releases, replays and the
tables (aggregates, features, ledger)."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest
from conftest import CAMPAIGNS, FEATURES, ROWS, Labelled, Server, schema, synthetic

import dpgate

FEATURE_NAMES = [name for name, *_ in FEATURES]


def test_health_and_datasets(server: Server, labelled: Labelled) -> None:
    labelled.analyst.health()
    datasets = labelled.analyst.datasets()
    assert [dataset.id for dataset in datasets] == [labelled.dataset.id]  # only the granted one
    dataset = datasets[0]
    assert isinstance(dataset, dpgate.Dataset)
    assert (
        dataset.n_rows == ROWS and dataset.privacy_unit == "label" and dataset.label == "converted"
    )
    assert [feature.name for feature in dataset.features] == FEATURE_NAMES
    assert dataset.dimensions[0].values == CAMPAIGNS
    assert dataset.budget.epsilon == 1000.0
    assert labelled.dataset.id in {dataset.id for dataset in server.admin().datasets()}


def test_a_replay_returns_an_equal_release(labelled: Labelled) -> None:
    key = f"py-replay-{uuid.uuid4()}"
    first = labelled.analyst.release(
        labelled.dataset, "walr", epsilon=0.5, delta=1e-6, map="auto", idempotency_key=key
    )
    spent = labelled.analyst.dataset(labelled.dataset).spent
    replay = labelled.analyst.release(
        labelled.dataset, "walr", epsilon=0.5, delta=1e-6, map="auto", idempotency_key=key
    )
    assert not first.replayed and replay.replayed
    assert replay == first
    assert replay.id == first.id and replay.result == first.result
    assert len(first.result.noisy_dot) == len(FEATURES) and first.result.map.name == "auto"
    assert labelled.analyst.dataset(labelled.dataset).spent == spent, "a replay spends nothing"
    assert labelled.analyst.get_release(labelled.dataset, first) == first


def test_a_dry_run_prices_without_spending(labelled: Labelled) -> None:
    spent = labelled.analyst.dataset(labelled.dataset).spent
    priced = labelled.analyst.release(
        labelled.dataset, "aggregate", 1.0, 1e-6, dry_run=True, statistics=["mean:converted"]
    )
    assert priced.id is None and priced.result is None and priced.dry_run
    assert priced.epsilon == 1.0 and priced.sigma > 0
    assert labelled.analyst.dataset(labelled.dataset).spent == spent


def test_aggregate_as_pandas(labelled: Labelled) -> None:
    frame = labelled.analyst.aggregate(
        labelled.dataset, ["count", "mean:value"], group_by=["campaign"], epsilon=1.0, delta=1e-6
    )
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == ["campaign", "statistic", "value", "std", "exact"]
    assert frame.shape == (len(CAMPAIGNS) * 2, 5)
    assert frame["value"].dtype == np.float64 and frame["std"].dtype == np.float64
    assert frame["exact"].dtype == np.bool_
    assert pd.api.types.is_string_dtype(frame["campaign"]) and pd.api.types.is_string_dtype(
        frame["statistic"]
    )
    assert set(frame["campaign"]) == set(CAMPAIGNS)
    # Under unit `label` the dimensions are public, so each group's count is
    # exact; the means of a private measure are noised.
    counts = frame[frame["statistic"] == "count"].set_index("campaign")
    assert counts["exact"].all() and (counts["std"] == 0).all()
    truth = labelled.rows["campaign"].value_counts()
    assert all(counts.loc[campaign, "value"] == truth[campaign] for campaign in CAMPAIGNS)
    means = frame[frame["statistic"] == "mean:value"]
    assert (~means["exact"]).all() and (means["std"] > 0).all()


def test_aggregate_as_polars_and_arrow(labelled: Labelled) -> None:
    frame = labelled.analyst.aggregate(
        labelled.dataset, ["count"], epsilon=0.5, delta=1e-6, output="polars"
    )
    assert isinstance(frame, pl.DataFrame)
    assert frame.schema == pl.Schema(
        {"statistic": pl.String, "value": pl.Float64, "std": pl.Float64, "exact": pl.Boolean}
    )
    assert frame.height == 1 and frame["value"][0] == ROWS  # N is public
    table = labelled.analyst.aggregate(
        labelled.dataset,
        ["mean:converted"],
        group_by=["campaign"],
        delta=1e-6,
        target_std=0.2,
        output="arrow",
    )
    assert isinstance(table, pa.Table)
    assert table.column_names == ["campaign", "statistic", "value", "std", "exact"]
    assert table.num_rows == len(CAMPAIGNS)
    assert max(table["std"].to_pylist()) <= 0.2


def test_an_aggregate_release_becomes_a_frame(labelled: Labelled) -> None:
    release = labelled.analyst.release(
        labelled.dataset,
        "aggregate",
        0.5,
        statistics=["sum:value"],
        group_by=["campaign"],
        mechanism="laplace",
    )
    frame = dpgate.aggregate_frame(release, ["campaign"])
    assert list(frame["statistic"]) == ["sum:value"] * len(CAMPAIGNS)
    assert release.delta == 0.0


def test_features_are_the_stored_rows(labelled: Labelled) -> None:
    frame = labelled.analyst.features(labelled.dataset)
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == ["row_id", *FEATURE_NAMES]
    assert len(frame) == labelled.analyst.dataset(labelled.dataset).n_rows == ROWS
    assert list(frame["row_id"]) == list(labelled.rows["row_id"])  # stored order
    # Exported as float32 (stored to f32 precision of the bounds' span).
    for name, low, high, _ in FEATURES:
        np.testing.assert_allclose(
            frame[name], labelled.rows[name], rtol=0, atol=1e-6 * (high - low)
        )
    table = labelled.analyst.features(labelled.dataset, "arrow", progress=False)
    assert table.num_rows == ROWS and table.schema.field("f0").type == pa.float32()
    assert labelled.analyst.features(labelled.dataset, "polars").columns == [
        "row_id",
        *FEATURE_NAMES,
    ]


def test_the_ledger_and_its_verification(server: Server, labelled: Labelled) -> None:
    made = labelled.analyst.release(
        labelled.dataset, "aggregate", 0.25, 1e-6, statistics=["mean:converted"]
    )
    admin = server.admin()
    ledger = admin.ledger(labelled.dataset)
    assert isinstance(ledger, pd.DataFrame)
    assert {"seq", "event", "actor", "epsilon", "delta", "release_id", "created_at", "hash"} <= set(
        ledger.columns
    )
    assert list(ledger["seq"]) == list(range(len(ledger)))
    assert made.id in set(ledger["release_id"])
    assert (ledger.loc[ledger["release_id"] == made.id, "actor"] == "ana").all()
    assert isinstance(ledger["created_at"].dtype, pd.DatetimeTZDtype)
    verification = admin.verify_ledger(labelled.dataset)
    assert verification.intact and verification.entries == len(ledger)
    profile = labelled.analyst.privacy_profile(labelled.dataset, deltas=[1e-6, 1e-3])
    assert [point.delta for point in profile.points] == [1e-6, 1e-3]
    assert profile.points[0].epsilon >= profile.points[1].epsilon > 0
    with pytest.raises(dpgate.Forbidden):
        labelled.analyst.ledger(labelled.dataset)


def test_the_release_listing_follows_pages(server: Server, labelled: Labelled) -> None:
    made = labelled.analyst.release(
        labelled.dataset, "aggregate", 0.1, 1e-6, statistics=["mean:converted"]
    )
    mine = labelled.analyst.releases(labelled.dataset)
    assert made.id in [summary.id for summary in mine]
    assert all(summary.analyst == "ana" for summary in mine)
    assert [summary.seq for summary in mine] == sorted(summary.seq for summary in mine)
    assert [summary.id for summary in server.admin().releases(labelled.dataset, analyst="ana")] == [
        summary.id for summary in mine
    ]


def test_budgets_and_caps(server: Server) -> None:
    dataset = server.dataset(epsilon=2.0, rows=50)
    admin = server.admin()
    changed = admin.change_budget(
        dataset,
        budget={"epsilon": 5.0, "delta": 1e-3},
        caps={"capped": {"epsilon": 0.5, "delta": 1e-6}},
    )
    assert changed.budget.epsilon == 5.0
    assert [(spend.analyst, spend.cap.epsilon) for spend in changed.analysts] == [("capped", 0.5)]
    capped = server.analyst("capped", [dataset.id])
    with pytest.raises(dpgate.BudgetExhausted):
        capped.release(dataset, "aggregate", 1.0, 1e-6, statistics=["mean:converted"])
    uncapped = admin.change_budget(dataset, caps={"capped": None})
    assert all(spend.cap is None for spend in uncapped.analysts or [])
    assert set(admin.ledger(dataset)["event"]) >= {"budget", "cap"}


def test_a_gradient_session(server: Server, labelled: Labelled) -> None:
    session = labelled.analyst.release(labelled.dataset, "gradient", 1.0, 1e-6, calls=2)
    assert session.result.session.calls == 2
    theta = np.zeros(len(FEATURES) + 1)
    call = labelled.analyst.gradient_call(labelled.dataset, session, 0, theta)
    assert call.call == 0 and len(call.gradient) == len(theta) and call.remaining == 1
    assert (
        labelled.analyst.gradient_call(labelled.dataset, session, 0, theta) == call
    )  # a retry replays


def test_uploads_in_every_form(server: Server, tmp_path: Path) -> None:
    admin = server.admin()
    dataset = server.dataset(rows=10)
    rows = synthetic(30, seed=3, prefix="u")
    arrow = pa.Table.from_pandas(rows.iloc[:10], preserve_index=False)
    assert admin.upload_rows(dataset, arrow).rows_added == 10
    assert admin.upload_rows(dataset, pl.from_pandas(rows.iloc[10:20])).rows_added == 10
    path = tmp_path / "rows.csv"
    rows.iloc[20:].to_csv(path, index=False)
    report = admin.upload_rows(dataset, path)
    assert report.rows_added == 10 and report.n_rows == 40
    with pytest.raises(dpgate.InvalidInput) as caught:
        admin.upload_rows(dataset, b"row_id,converted\nx,2\n")
    assert caught.value.detail


def test_metrics(server: Server) -> None:
    text = dpgate.Client(server.metrics_url).metrics()
    assert "# TYPE" in text


def test_a_user_dataset_keeps_n_from_analysts_and_its_releases(server: Server) -> None:
    admin = server.admin()
    created = admin.create_dataset(
        **schema(f"people-{server.backend}", privacy_unit="user"),
        user_column="person",
        max_rows_per_user=5,
        max_rows_per_group_per_user=2,
    )
    assert isinstance(created, dpgate.Dataset)
    bounds = created.contribution_bounds
    assert (bounds.max_rows_per_user, bounds.max_groups_per_user) == (5, 5)
    assert bounds.max_rows_per_group_per_user == 2 and created.user_column == "person"
    rows = synthetic(20, seed=5, prefix="p")
    rows["person"] = [f"person-{i % 4}" for i in range(20)]
    assert admin.upload_rows(created, rows).n_rows == 20
    assert admin.dataset(created).n_rows == 20
    analyst = server.analyst("ana", [created.id])
    assert analyst.dataset(created).n_rows is None
    # An aggregate reads at most 5 rows a person and does not say its N.
    released = analyst.release(created, "aggregate", 1.0, 1e-6, statistics=["count"])
    assert released.n is None and released.sigma > 0
    # The learners release their noisy count with the model; objective
    # perturbation is pure ε only.
    model = analyst.release(created, "model/dp-gd", 1.0, 1e-6, steps=10)
    assert model.n is None and model.result.noisy_rows is not None
    perturbed = analyst.release(created, "model/objective-perturbation", 1.0)
    assert perturbed.n is None and perturbed.result.noisy_rows is not None
    assert perturbed.result.objective.b_scale > 0
    with pytest.raises(dpgate.InvalidInput):
        analyst.release(created, "model/objective-perturbation", 1.0, 1e-6)
    with pytest.raises(dpgate.InvalidInput):
        admin.create_dataset(**schema("no-bound", privacy_unit="user"), user_column="person")
