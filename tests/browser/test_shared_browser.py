"""A notebook as colleagues share it: run in JupyterLab, the diff's "compare by" box typed
into as a user types, saved, and reopened in a fresh page with a new kernel; and a notebook
executed elsewhere (nbclient) opened untrusted. Both show their results, never "model not
found".
"""

from __future__ import annotations

import json
import os
import re

import nbformat
import pytest
from nbclient import NotebookClient

from .lab import error_outputs, open_notebook, output_text, run_all_cells, wait_for_run
from .test_cells_browser import ANTISPAM, write_notebook

pytestmark = pytest.mark.browser

TIMEOUT_MS = 120_000
CELLS = [
    "%load_ext restream_kit",
    f"%%restream v1 --log social_small\n{ANTISPAM}",
    f"%%restream v2 --log social_small --baseline v1\n{ANTISPAM.replace('2 *', '3 *')}",
]
_SAVE_JS = "() => window.jupyterapp.commands.execute('docmanager:save')"
_THEME_JS = "(theme) => window.jupyterapp.commands.execute('apputils:change-theme', {theme})"
_DARK_JS = "() => document.body.dataset.jpThemeLight === 'false'"
_FILL_JS = "(node) => getComputedStyle(node).fill"


def _luminance(colour: str) -> float:
    """0 (black) to 1 (white), of a computed ``rgb(r, g, b)``."""
    r, g, b = (int(v) for v in re.findall(r"\d+", colour)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def _results_shown(page, name: str) -> str:
    """The text of the notebook's outputs, once both monitors say done; fails on any error
    shown (a widget that cannot be displayed among them)."""
    page.locator(".jp-OutputArea-output", has_text=re.compile(r"diff against v1")).first.wait_for(
        timeout=TIMEOUT_MS
    )
    text = output_text(page)
    errors = "\n".join(error_outputs(page))
    assert not errors and "model not found" not in text, f"{name} shows errors:\n{errors}"
    assert len(re.findall(r"done in \d+\.\d\d s", text)) == 2, text[:3000]
    assert "diff against serial replay of v1" in text and "identical" in text, text[:3000]
    return text


def test_typed_compare_by_then_saved_and_reopened_in_a_fresh_page(lab_page, lab_server):
    name = write_notebook(lab_server, "shared.ipynb", CELLS)
    open_notebook(lab_page, lab_server, name)
    run_all_cells(lab_page)
    wait_for_run(lab_page)
    _results_shown(lab_page, name)

    # Typed into the compare-by box key by key, as a user types, then Enter.
    box = lab_page.locator(".jp-NotebookPanel .widget-text input").last
    box.click()
    lab_page.keyboard.type("sender", delay=40)
    lab_page.keyboard.press("Enter")
    v2 = lab_page.locator(".jp-NotebookPanel .jp-Cell").nth(2)
    v2.locator(".jp-OutputArea-output", has_text="by sender").first.wait_for(timeout=TIMEOUT_MS)
    assert "keys only in" in v2.inner_text()

    # In the dark theme the unfolded DAG's labels and legend are light on dark.
    v2.get_by_role("button", name="plan").first.click()
    label = v2.locator("svg.restream-dag text").first
    label.wait_for(timeout=TIMEOUT_MS)
    try:
        lab_page.evaluate(_THEME_JS, "JupyterLab Dark")
        lab_page.wait_for_function(_DARK_JS, timeout=30_000)
        assert _luminance(label.evaluate(_FILL_JS)) > 0.6
        legend = v2.locator("svg.restream-dag text", has_text="critical path").first
        assert _luminance(legend.evaluate(_FILL_JS)) > 0.6
    finally:
        lab_page.evaluate(_THEME_JS, "JupyterLab Light")
        lab_page.wait_for_function(f"() => !({_DARK_JS})()", timeout=30_000)

    # Saved (with the widgets' state: the project's JupyterLab setting), the page left, the
    # kernel gone.
    lab_page.evaluate(_SAVE_JS)
    saved = json.loads((lab_server.root / name).read_text())
    state = saved["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert state, "the widget state was not saved with the notebook"
    lab_page.goto("about:blank")
    lab_server.shutdown_kernels()

    # Reopened in a fresh page load, with a new kernel: the views drawn from the saved state.
    open_notebook(lab_page, lab_server, name)
    text = _results_shown(lab_page, name)
    assert "by sender" in text, "the reopened diff is not the one last shown"


def test_a_notebook_executed_elsewhere_opens_with_its_results(
    lab_page, lab_server, tmp_path, monkeypatch
):
    """Executed by nbclient (as a CI job or a colleague's script would), opened untrusted:
    JupyterLab shows each view's static HTML."""
    monkeypatch.setenv("RESTREAM_DISPLAY", "widgets")
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / ".restream"))
    nb = nbformat.read(lab_server.root / write_notebook(lab_server, "sent.ipynb", CELLS), 4)
    NotebookClient(
        nb, timeout=300, kernel_name="python3", store_widget_state=True,
        resources={"metadata": {"path": str(lab_server.root)}},
    ).execute()  # fmt: skip
    assert os.environ["RESTREAM_DISPLAY"] == "widgets"
    nbformat.write(nb, lab_server.root / "sent.ipynb")
    open_notebook(lab_page, lab_server, "sent.ipynb")
    _results_shown(lab_page, "sent.ipynb")
    assert lab_page.locator(".jp-NotebookPanel .restream-static").count() >= 6
    # The drawings are images (JupyterLab strips inline SVG from an untrusted notebook): the
    # DAGs (in the plan's folded details) and the v2 diff's timeline, each decoded.
    images = lab_page.locator(".jp-NotebookPanel .restream-static img.restream-image")
    assert images.count() >= 3
    sizes = images.evaluate_all("(imgs) => imgs.map((i) => [i.alt, i.complete, i.naturalWidth])")
    assert all(done and width > 100 for _alt, done, width in sizes), sizes
    assert any(alt == "differences over time" for alt, *_ in sizes), sizes
