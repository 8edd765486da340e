"""A real dpgate server for the tests, and the datasets they share.

``server`` starts the binary (``target/debug/dpgate``, or env
``DPGATE_BIN``; ``cargo build --bin dpgate`` makes it) on a free port over
a fresh database: an SQLite file always, and a fresh Postgres database when
``TEST_POSTGRES_URL`` is set (as the Rust tests do; without it the Postgres
cases are skipped and the run's summary says so in a banner). Tokens are
minted by the binary itself (``dpgate token``), signed with the server's
secret.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpgate

ROOT = Path(__file__).resolve().parents[2]
SECRET = "dpgate-python-test-secret-0123456789abcdef"
#: The JSON body limit of the test server: low, so that a 413 is cheap to
#: provoke (every other JSON body of the tests is far smaller).
MAX_BODY_BYTES = 64 * 1024

#: The synthetic features: name, declared bounds, and the true model's
#: weight on the feature scaled into [0, 1].
FEATURES = [
    ("f0", 0.0, 1.0, 2.5),
    ("f1", -5.0, 5.0, -2.0),
    ("f2", 10.0, 20.0, 1.5),
    ("f3", 0.0, 100.0, -1.0),
]
INTERCEPT = -0.25
CAMPAIGNS = ["a", "b", "c"]
LABEL = "converted"
ROWS = 2_000

_postgres_skipped: list[str] = []


def binary(variable: str, name: str) -> Path:
    """A binary of the workspace: env ``variable``, else target/debug."""
    path = Path(os.environ.get(variable) or ROOT / "target" / "debug" / name)
    if not path.is_file():
        pytest.fail(
            f"no {name} binary at {path}: build it (cargo build --bin {name}) or set {variable}"
        )
    return path


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def synthetic(rows: int, seed: int, prefix: str) -> pd.DataFrame:
    """Rows of the test schema: uniform features within their bounds,
    labels from a known logistic model of the scaled features, a measure
    and a dimension. The same seed gives the same rows."""
    generator = np.random.default_rng(seed)
    frame = pd.DataFrame({"row_id": [f"{prefix}{index}" for index in range(rows)]})
    logit = np.full(rows, INTERCEPT)
    for name, low, high, weight in FEATURES:
        scaled = generator.uniform(0.0, 1.0, rows)
        frame[name] = low + scaled * (high - low)
        logit += weight * scaled
    frame.insert(
        1, LABEL, (generator.uniform(size=rows) < 1.0 / (1.0 + np.exp(-logit))).astype(int)
    )
    frame["value"] = generator.uniform(0.0, 100.0, rows)
    frame["campaign"] = generator.choice(CAMPAIGNS, rows)
    return frame


def schema(name: str, privacy_unit: str = "label", epsilon: float = 1000.0) -> dict[str, Any]:
    """The keywords of ``create_dataset`` for the test schema."""
    return {
        "name": name,
        "privacy_unit": privacy_unit,
        "features": [{"name": name, "min": low, "max": high} for name, low, high, _ in FEATURES],
        "label": LABEL,
        "measures": [{"name": "value", "min": 0, "max": 100}],
        "dimensions": [{"name": "campaign", "values": CAMPAIGNS}],
        "budget": {"epsilon": epsilon, "delta": 1e-3},
        "accountant": "rdp",
    }


@dataclass
class Server:
    """A running test server."""

    backend: str
    url: str
    metrics_url: str
    binary: Path
    env: dict[str, str]
    admin_token: str

    def mint(self, role: str, sub: str, datasets: Sequence[str] = ()) -> str:
        """A token from ``dpgate token``."""
        command = [str(self.binary), "token", "--role", role, "--sub", sub]
        if datasets:
            command += ["--datasets", ",".join(datasets)]
        return subprocess.run(
            command, env=self.env, check=True, capture_output=True, text=True
        ).stdout.strip()

    def admin(self) -> dpgate.Client:
        """A client with an admin token."""
        return dpgate.Client(self.url, self.admin_token)

    def analyst(self, sub: str, datasets: Sequence[str]) -> dpgate.Client:
        """A client for analyst ``sub`` granted ``datasets``."""
        return dpgate.Client(self.url, self.mint("analyst", sub, datasets))

    def dataset(
        self, privacy_unit: str = "label", epsilon: float = 1000.0, rows: int = ROWS
    ) -> dpgate.Dataset:
        """A fresh dataset of the test schema with ``rows`` synthetic rows."""
        admin = self.admin()
        dataset = admin.create_dataset(
            **schema(f"py-{uuid.uuid4().hex[:12]}", privacy_unit, epsilon)
        )
        assert isinstance(dataset, dpgate.Dataset)
        admin.upload_rows(dataset, synthetic(rows, seed=7, prefix="r"))
        return admin.dataset(dataset)


def _postgres_database(base: str) -> tuple[str, str]:
    """A fresh Postgres database beside ``base``'s (so parallel runs never
    share one): its URL and name."""
    name = f"dpgate_py_{uuid.uuid4().hex}"
    psql(base, f"CREATE DATABASE {name}")
    prefix, rest = base.rsplit("/", 1)
    query = f"?{rest.split('?', 1)[1]}" if "?" in rest else ""
    return f"{prefix}/{name}{query}", name


def psql(url: str, statement: str) -> None:
    """Runs one SQL statement with psql."""
    if shutil.which("psql") is None:
        pytest.fail("TEST_POSTGRES_URL is set but psql is not installed")
    subprocess.run(
        ["psql", url, "-v", "ON_ERROR_STOP=1", "-qc", statement], check=True, capture_output=True
    )


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the server exited before answering /healthz:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    pytest.fail(f"the server did not answer /healthz within 60 s:\n{log.read_text()}")


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A real dpgate server over a fresh database of each backend."""
    backend: str = request.param
    base = os.environ.get("TEST_POSTGRES_URL", "")
    if backend == "postgres" and not base:
        reason = "TEST_POSTGRES_URL is not set: the Python tests ran on SQLite only"
        _postgres_skipped.append(reason)
        pytest.skip(f"POSTGRES SKIPPED: {reason}")
    directory = tmp_path_factory.mktemp(f"dpgate-{backend}")
    database_url, postgres_name = (
        _postgres_database(base)
        if backend == "postgres"
        else (f"sqlite://{directory / 'dpgate.db'}", None)
    )
    port, metrics_port = free_port(), free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DPGATE_KEY_FILE", "DPGATE_URL", "DPGATE_TOKEN")
    }
    env.update(
        {
            "DPGATE_ADDR": f"127.0.0.1:{port}",
            "DPGATE_METRICS_ADDR": f"127.0.0.1:{metrics_port}",
            "DATABASE_URL": database_url,
            "DPGATE_DATA_DIR": str(directory / "data"),
            "DPGATE_JWT_SECRET": SECRET,
            "DPGATE_NO_ADMIN_TOKEN": "true",
            "DPGATE_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        }
    )
    executable = binary("DPGATE_BIN", "dpgate")
    log = directory / "server.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(executable), "serve"], env=env, stdout=output, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, log)
        admin_token = Server(backend, url, "", executable, env, "").mint("admin", "admin")
        yield Server(backend, url, f"http://127.0.0.1:{metrics_port}", executable, env, admin_token)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if postgres_name is not None:
            psql(base, f"DROP DATABASE IF EXISTS {postgres_name} WITH (FORCE)")


@dataclass
class Labelled:
    """The shared labelled dataset (unit ``label``), an analyst of it, and
    public holdout rows from the same generator."""

    dataset: dpgate.Dataset
    analyst: dpgate.Client
    analyst_token: str
    rows: pd.DataFrame
    holdout: pd.DataFrame
    holdout_csv: Path


@pytest.fixture(scope="session")
def labelled(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Labelled:
    """2,000 synthetic rows (k = 4, labels from a known logistic model)
    with public feature bounds, and a 2,000-row labelled holdout CSV."""
    dataset = server.dataset()
    token = server.mint("analyst", "ana", [dataset.id])
    holdout = synthetic(ROWS, seed=11, prefix="h")
    holdout_csv = tmp_path_factory.mktemp("holdout") / "holdout.csv"
    holdout.to_csv(holdout_csv, index=False)
    return Labelled(
        dataset=dataset,
        analyst=dpgate.Client(server.url, token),
        analyst_token=token,
        rows=synthetic(ROWS, seed=7, prefix="r"),
        holdout=holdout,
        holdout_csv=holdout_csv,
    )


@pytest.fixture(scope="session")
def client_binary() -> Path:
    """``dpgate-client`` (env ``DPGATE_CLIENT_BIN``, else target/debug)."""
    return binary("DPGATE_CLIENT_BIN", "dpgate-client")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """A banner when the Postgres cases were skipped, past the summary's
    one line of skips."""
    if _postgres_skipped:
        terminalreporter.write_line("")
        terminalreporter.write_line("#" * 72, yellow=True, bold=True)
        terminalreporter.write_line(
            f"##  *** POSTGRES PYTHON TESTS SKIPPED: {_postgres_skipped[0]} ***",
            yellow=True,
            bold=True,
        )
        terminalreporter.write_line("#" * 72, yellow=True, bold=True)
