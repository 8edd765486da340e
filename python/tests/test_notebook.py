"""python/examples/quickstart.ipynb runs end to end against a real server,
as an analyst of the shared dataset, with the public holdout."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, Labelled, Server
from nbclient import NotebookClient

NOTEBOOK = ROOT / "python" / "examples" / "quickstart.ipynb"


def test_the_committed_notebook_has_no_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, "clear the notebook's outputs"


def test_the_quickstart_notebook_runs(
    server: Server, labelled: Labelled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kernel is a child process: it reads these from its environment.
    monkeypatch.setenv("DPGATE_URL", server.url)
    monkeypatch.setenv("DPGATE_TOKEN", labelled.analyst_token)
    monkeypatch.setenv("DPGATE_DATASET", labelled.dataset.id)
    monkeypatch.setenv("DPGATE_HOLDOUT", str(labelled.holdout_csv))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # kernel "python3": ipykernel's own kernel for the running interpreter
    # (the test venv's) when no other spec of that name is installed.
    NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    errors = [
        output
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if output.output_type == "error"
    ]
    assert not errors
    assert (tmp_path / "quickstart-model.json").is_file()
    assert (tmp_path / "quickstart-scores.csv").is_file()
