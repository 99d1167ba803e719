"""Every demo notebook runs top to bottom in a real kernel, and is committed without outputs."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ has no notebooks"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path):
    cells = json.loads(path.read_text())["cells"]
    assert all(
        not c.get("outputs") and not c.get("execution_count")
        for c in cells
        if c["cell_type"] == "code"
    )


def _modes(path: Path) -> list[str]:
    """Display modes to run a notebook in: both, unless its metadata names fewer.

    A notebook that never uses the ``%%restream`` views sets
    ``"restream": {"display_modes": ["text"]}`` in its metadata.
    """
    meta = json.loads(path.read_text()).get("metadata", {}).get("restream", {})
    return list(meta.get("display_modes", ["text", "widgets"]))


CASES = [(path, mode) for path in NOTEBOOKS for mode in _modes(path)]


@pytest.mark.parametrize(("path", "mode"), CASES, ids=[f"{p.stem}-{m}" for p, m in CASES])
def test_notebook_runs_top_to_bottom(path, mode, tmp_path, monkeypatch, request):
    """Text mode is what a terminal or nbclient shows; widget mode builds every view too."""
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / ".restream"))
    if path.stem == "04_remote_cluster":
        # The tests' own cluster (never make cluster's ports); its token through the environment.
        cluster = request.getfixturevalue("test_cluster")
        monkeypatch.setenv("RESTREAM_DEMO_MASTER", cluster.master)
        monkeypatch.setenv("RESTREAM_DEMO_CONNECT", cluster.connect)
        monkeypatch.setenv("RESTREAM_CONNECT_TOKEN", cluster.token)
    monkeypatch.setenv("RESTREAM_DISPLAY", mode)
    _execute(path, path.parent)


def test_a_copy_of_a_demo_notebook_runs_in_another_folder(tmp_path, monkeypatch, root):
    """Its data and program come through the package, not ``../sample_data`` or ``../examples``."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    assert root not in folder.resolve().parents
    monkeypatch.setenv("RESTREAM_DISPLAY", "text")
    monkeypatch.delenv("RESTREAM_HOME", raising=False)
    copy = folder / "01_antispam_backtest.ipynb"
    copy.write_bytes((root / "notebooks" / copy.name).read_bytes())
    nb = _execute(copy, folder)
    printed = "".join(
        o.get("text", "")
        for c in nb.cells
        for o in c.get("outputs", [])
        if o.get("name") == "stdout"
    )
    assert "identical" in printed and "removed" in printed, printed
    # The run catalog went where the notebook ran.
    assert (folder / ".restream").is_dir()


def _execute(path: Path, folder: Path):
    """Run notebook ``path`` in a kernel whose working folder is ``folder``; fail on errors."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    )
    client.execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    stderr = [
        o["text"]
        for c in nb.cells
        for o in c.get("outputs", [])
        if o.get("output_type") == "stream" and o.get("name") == "stderr"
    ]
    assert not any("Traceback" in text or "Error" in text for text in stderr), stderr
    return nb
