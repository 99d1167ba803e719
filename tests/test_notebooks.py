"""Every demo notebook runs top to bottom in a real kernel, and is committed without outputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter

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
    nb = _execute(path, path.parent, store_widget_state=mode == "widgets")
    if mode == "widgets":
        _check_saved_outputs(nb)


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def _check_saved_outputs(nb) -> None:
    """What the executed notebook would show saved and reopened without its kernel: each
    ``%%restream`` cell's outputs carry a static HTML form of the monitor's final line and
    the diff beside their widget, whose state is saved in the notebook's metadata; converted to
    HTML it shows them, with its widget state and without."""
    cells = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%%restream")]
    assert cells
    state = nb.metadata["widgets"][WIDGET_STATE]["state"]
    for cell in cells:
        shown = [o["data"] for o in cell.outputs if WIDGET_VIEW in o.get("data", {})]
        assert shown and all(d[WIDGET_VIEW]["model_id"] in state for d in shown), cell.source
        static = "\n".join(d.get("text/html", "") for d in shown)
        assert "restream-static" in static and "data-status='done'" in static, static[:2000]
        assert re.search(r"done in \d+\.\d\d s", static), static[:2000]
        if "--sweep" in cell.source.splitlines()[0]:
            assert "alt='rows per output table' src='data:image/svg+xml;base64," in static
        else:
            assert re.search(r"diff against [^<]+</b>: <span[^>]*>(identical|differs)", static)
        assert "restream-plan" in static and "alt='handler DAG of " in static
        assert "waiting" not in "\n".join(d["text/plain"] for d in shown)
    exporter = HTMLExporter()
    with_state, _ = exporter.from_notebook_node(nb)
    assert "done in" in with_state and "diff against" in with_state
    without = nbformat.from_dict(json.loads(json.dumps(nb)))
    del without.metadata["widgets"]
    page, _ = exporter.from_notebook_node(without)
    assert page.count("restream-static") >= 3 * len(cells), "no static form in the page"
    assert "model not found" not in page and "done in" in page and "diff against" in page


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


def _execute(path: Path, folder: Path, store_widget_state: bool = False):
    """Run notebook ``path`` in a kernel whose working folder is ``folder``; fail on errors."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}},
        store_widget_state=store_widget_state,
    )  # fmt: skip
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
