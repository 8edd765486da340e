"""Times label-blind training three ways on the same server and data: the
Python package's ``WalrClassifier.fit`` (features downloaded, one WALR
release, training), ``dpgate-client train`` (the same flow in the CLI)
and scikit-learn's non-private ``LogisticRegression.fit`` on the labelled
rows in memory; each model's AUC on a fresh holdout beside its time.

    python python/benchmarks/fit_timing.py --url URL --token ADMIN \\
        --client target/release/dpgate-client --dpgate target/release/dpgate \\
        [--rows 10000 1000000] [--k 32]

The server must allow uploads of the largest set (DPGATE_MAX_INGEST_BYTES).
Each run creates its own datasets (unit ``label``, map ``auto``: the
defaults) and mints an analyst token for each with ``dpgate token`` (so
it runs with the server's DATABASE_URL and DPGATE_JWT_SECRET or key file).
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

import dpgate

EPSILON, DELTA = 1.0, 1e-6


def synthetic(rows: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Features in [-1, 1]^k, labels from a fixed logistic model."""
    rng = np.random.default_rng(seed)
    theta = np.random.default_rng(0).normal(0.0, 1.5 / np.sqrt(k), k)
    x = np.clip(rng.normal(0.0, 0.5, (rows, k)), -1.0, 1.0)
    y = (rng.random(rows) < 1.0 / (1.0 + np.exp(-(x @ theta)))).astype(np.int64)
    return x, y


def dataset(client: dpgate.Client, x: np.ndarray, y: np.ndarray) -> str:
    names = [f"f{j}" for j in range(x.shape[1])]
    created = client.create_dataset(
        f"fit-timing-{uuid.uuid4().hex[:8]}",
        privacy_unit="label",
        features=[{"name": name, "min": -1.0, "max": 1.0} for name in names],
        label="y",
        budget={"epsilon": 100.0, "delta": 1e-3},
    )
    columns = {"row_id": [f"r{i}" for i in range(len(y))], "y": y}
    columns.update({name: x[:, j] for j, name in enumerate(names)})
    client.upload_rows(created, pa.table(columns))
    return created.id


def timed(work, *args, **kwargs):
    """Seconds ``work(*args, **kwargs)`` took, and what it returned."""
    start = time.perf_counter()
    out = work(*args, **kwargs)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True, help="an admin token")
    parser.add_argument("--client", required=True, help="the dpgate-client binary")
    parser.add_argument("--dpgate", required=True, help="the dpgate binary, to mint tokens")
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--k", type=int, default=32)
    args = parser.parse_args()
    client = dpgate.Client(args.url, args.token)
    print("| N × k | WalrClassifier.fit | dpgate-client train | sklearn (non-private) |")
    print("|---|---|---|---|")
    for rows in args.rows:
        x, y = synthetic(rows, args.k, seed=1)
        holdout_x, holdout_y = synthetic(100_000, args.k, seed=2)
        id = dataset(client, x, y)
        token = subprocess.run(
            [args.dpgate, "token", "--role", "analyst", "--sub", "fit-timing", "--datasets", id],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        analyst = client.with_token(token)
        estimator = dpgate.WalrClassifier(analyst, id, epsilon=EPSILON, delta=DELTA, progress=False)
        seconds_py, model = timed(estimator.fit)
        auc_py = roc_auc_score(holdout_y, model.decision_function(holdout_x))
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "model.json"
            command = [
                args.client,
                "--url",
                args.url,
                "--token",
                token,
                "--json",
                "train",
                "--dataset",
                id,
                "--epsilon",
                str(EPSILON),
                "--delta",
                str(DELTA),
                "--out",
                str(out),
            ]
            seconds_cli, _ = timed(subprocess.run, command, check=True, capture_output=True)
            cli_model = dpgate.WalrClassifier.load(out)
        auc_cli = roc_auc_score(holdout_y, cli_model.decision_function(holdout_x))
        seconds_sk, baseline = timed(LogisticRegression(max_iter=1000).fit, x, y)
        auc_sk = roc_auc_score(holdout_y, baseline.decision_function(holdout_x))
        print(
            f"| {rows:,} × {args.k} | {seconds_py:.2f} s (AUC {auc_py:.3f}) "
            f"| {seconds_cli:.2f} s (AUC {auc_cli:.3f}) | {seconds_sk:.2f} s (AUC {auc_sk:.3f}) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
