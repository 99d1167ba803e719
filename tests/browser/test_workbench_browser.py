"""The demo notebooks, run in JupyterLab in headless Chromium the way a user runs them.

Each test opens a notebook from a temporary copy of notebooks/, runs Run > Run All Cells, waits
for every cell to finish, checks what is drawn, and keeps a screenshot in docs/screenshots/.
Run with ``.venv/bin/python -m pytest -m browser tests/browser``.
"""

from __future__ import annotations

import re
from contextlib import contextmanager

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from .lab import (
    SCREENSHOTS,
    error_outputs,
    open_notebook,
    output_text,
    require_notebook,
    run_all_cells,
    screenshot_notebook,
    wait_for_run,
)

pytestmark = pytest.mark.browser

WIDGET_TIMEOUT_MS = 120_000

# Every ipywidgets progress bar in the notebook: how full it is drawn (from its inline style,
# and measured against its track) and the text of the row it sits in.
_PROGRESS_BARS_JS = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const bars = panel.content.node.querySelectorAll(
        '.widget-hprogress .progress > .progress-bar, .widget-vprogress .progress > .progress-bar');
    return [...bars].map((bar) => {
        const horizontal = bar.closest('.widget-hprogress') !== null;
        const track = bar.parentElement.getBoundingClientRect();
        const drawn = bar.getBoundingClientRect();
        // The row the bar sits in (the bar and its label), else the output holding it.
        const monitor = bar.closest('.widget-box') || bar.closest('.jp-OutputArea-output');
        return {
            percent: parseFloat(horizontal ? bar.style.width : bar.style.height),
            fraction: horizontal ? drawn.width / track.width : drawn.height / track.height,
            text: monitor ? monitor.innerText : '',
        };
    });
}"""

# Every plotly figure in the notebook: its title, whether it has been drawn at a visible size,
# and how many traces, shapes and annotations it holds.
_PLOTLY_FIGURES_JS = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    return [...panel.content.node.querySelectorAll('.js-plotly-plot')].map((plot) => {
        const svg = plot.querySelector('svg.main-svg');
        const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
        const title = plot.querySelector('.gtitle');
        return {
            title: title ? title.textContent : '',
            width: box.width,
            height: box.height,
            marks: plot.querySelectorAll('.trace, .shapelayer path, .annotation').length,
        };
    });
}"""

# True once the notebook has progress bars and every one of them is drawn at 100 %.
_ALL_BARS_FULL_JS = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const bars = [...panel.content.node.querySelectorAll(
        '.widget-hprogress .progress > .progress-bar, .widget-vprogress .progress > .progress-bar')];
    return bars.length > 0 && bars.every((bar) => {
        const horizontal = bar.closest('.widget-hprogress') !== null;
        return parseFloat(horizontal ? bar.style.width : bar.style.height) === 100;
    });
}"""

_DAG_TITLE = re.compile(r"Handler DAG")
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%")


def run_notebook(page, server, name: str) -> str:
    """Open ``name``, run all its cells, and return a description of any error it shows."""
    open_notebook(page, server, name)
    run_all_cells(page)
    wait_for_run(page)
    return "\n\n".join(error_outputs(page))


@contextmanager
def screenshot_when_done(page, target, tmp_path):
    """Keep a screenshot in ``target`` if the block passes; a failed run's goes to ``tmp_path``,
    so that the committed screenshot only ever shows a notebook that ran cleanly."""
    try:
        yield
    except BaseException:
        failed = tmp_path / f"{target.stem}-failed.png"
        try:
            screenshot_notebook(page, failed)
            print(f"screenshot of the failed run: {failed}")
        except Exception as error:  # the page may be gone; the original failure matters more
            print(f"no screenshot of the failed run: {error}")
        raise
    screenshot_notebook(page, target)


def test_quickstart_notebook(lab_page, lab_server, tmp_path):
    name = require_notebook("00_quickstart.ipynb").name
    with screenshot_when_done(lab_page, SCREENSHOTS / "quickstart.png", tmp_path):
        errors = run_notebook(lab_page, lab_server, name)
        assert not errors, f"{name} shows errors:\n{errors}"
        text = output_text(lab_page)
        assert "events/s" in text, f"no throughput line in the outputs of {name}:\n{text[:2000]}"
        assert "@on(" in text, f"the rule's source is not among the outputs of {name}"
        assert lab_page.locator(".jp-OutputArea-output table").count(), "no table was drawn"


@pytest.mark.timeout(1200)
def test_antispam_backtest_notebook(lab_page, lab_server, tmp_path):
    name = require_notebook("01_antispam_backtest.ipynb").name
    with screenshot_when_done(lab_page, SCREENSHOTS / "workbench.png", tmp_path):
        check_workbench_notebook(lab_page, lab_server, name)


def check_workbench_notebook(page, server, name: str) -> None:
    """Run ``name`` and check the workbench's views: progress at 100 %, the handler DAG, the
    diff view, and no error anywhere."""
    errors = run_notebook(page, server, name)
    assert not errors, f"{name} shows errors:\n{errors}"

    # (a) every replay's progress bar reaches 100 %: its inline width says 100 %, it is drawn
    # as wide as its track, the label beside it reads 100 % (at least the events bar has such a
    # label), and no label beside a bar shows another percentage. A monitor may finish a moment
    # after its cell, so this waits.
    try:
        page.wait_for_function(_ALL_BARS_FULL_JS, timeout=WIDGET_TIMEOUT_MS)
    except PlaywrightTimeout:
        bars = page.evaluate(_PROGRESS_BARS_JS)
        pytest.fail(f"the progress bars of {name} did not all reach 100 %: {bars}", pytrace=False)
    bars = page.evaluate(_PROGRESS_BARS_JS)
    for bar in bars:
        assert abs(bar["fraction"] - 1) < 0.01, f"a progress bar at 100 % is not drawn full: {bar}"
        shown = [float(p) for p in _PERCENT.findall(bar["text"])]
        assert all(p == 100 for p in shown), f"a full progress bar is labelled {bar['text']!r}"
    assert any(_PERCENT.search(bar["text"]) for bar in bars), (
        f"no progress bar of {name} has a label reading 100 %: {bars}"
    )

    # (b) the plan is folded to one line; its button unfolds the handler DAG (a static SVG
    # beside the text plan) with its handlers.
    page.locator(".jp-NotebookPanel .jp-OutputArea-output").get_by_role(
        "button", name="plan"
    ).first.click()
    dag = page.locator(".jp-NotebookPanel svg.restream-dag").first
    dag.wait_for(state="visible", timeout=WIDGET_TIMEOUT_MS)
    box = dag.bounding_box()
    assert box and box["width"] > 100 and box["height"] > 100, f"the DAG is not drawn: {box}"
    assert page.locator(".jp-NotebookPanel svg.restream-dag circle").count() >= 4

    # (c) the diff view is drawn: a visible output headed "diff against <baseline>".
    diff = page.locator(".jp-NotebookPanel .jp-OutputArea-output").filter(
        has_text=re.compile(r"diff against\s+\S", re.IGNORECASE)
    )
    diff.first.wait_for(state="visible", timeout=WIDGET_TIMEOUT_MS)
    box = diff.first.bounding_box()
    assert box and box["width"] > 0 and box["height"] > 0, "the diff view has no size"

    # (d) nothing went wrong while the widgets and figures were drawn either.
    late = "\n\n".join(error_outputs(page))
    assert not late, f"{name} shows errors:\n{late}"
