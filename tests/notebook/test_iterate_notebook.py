"""``--sweep`` and ``--baseline`` reuse cells executed by a real kernel (nbclient), with the
widgets the notebook shows, on the serial engine and on Spark (the kernel's own local session).

The notebook's own cells assert: every sweep variant equals its own serial replay, the sweep
view draws those counts and its click handler opens the clicked variant's diff against the
baseline; a ``--baseline`` cell lists the stages it reused and equals a full replay.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from iterate.test_iterate import ANTISPAM  # noqa: E402 - the swept anti-spam rule

STRICTER = ANTISPAM.replace('param("ratio", 2.0)', 'param("ratio", 3.0)')

CHECK_SWEEP = """\
import restream_kit as rk
from plotly.callbacks import Points
from restream_kit.io.compare import diff
from widgets.sweep_view import VIEWS

rule = open("rule.py").read()
replays = [rk.replay(rule, "social_small", params=v.params) for v in v3.variants]
for variant, want in zip(v3.variants, replays):
    assert sorted(variant.result.tables) == sorted(want.tables)
    for name, table in want.tables.items():
        assert variant.result.tables[name].equals(table), (variant.label, name)
    assert variant.result.state == want.state, variant.label
counts = [r.metrics.rows["spam"] for r in replays]
assert len(set(counts)) == 3, counts
view = VIEWS["v3"]
(trace,) = view.figure.data
assert list(trace.x) == [1.5, 2, 3] and list(trace.y) == counts, (trace.x, trace.y)
shown = view.on_plot_click(
    trace, Points(point_inds=[0], xs=[1.5], ys=[counts[0]], trace_name="spam", trace_index=0)
)
want = diff(replays[0], rk.replay(rule, "social_small"))
assert not want.empty and shown.summary() == want.summary(), (shown.summary(), want.summary())
assert view.selected == 0 and "added" in view.diff_view.counts.value
print("sweep view checked on", v3.engine)
"""

CHECK_REUSE = """\
stricter = open("stricter.py").read()
assert v2.ok, v2.error
assert v2.reuse["reused_stages"] == ["befriend", "tally_sender"], v2.reuse
assert "flag" in v2.reuse["rerun_stages"], v2.reuse
full = rk.replay(stricter, "social_small")
for name, table in full.tables.items():
    assert v2.result.tables[name].equals(table), name
assert v2.result.state == full.state
print(v2.reuse_line())
"""


def _notebook(engine: str) -> nbformat.NotebookNode:
    on = f" --engine {engine}" + (" --master local[2]" if engine == "spark" else "")
    cells = [
        "%load_ext restream_kit",
        f"%%restream v3 --log social_small --sweep ratio=1.5,2,3{on}\n{ANTISPAM}",
        CHECK_SWEEP,
        f"%%restream v1 --log social_small{on}\n{ANTISPAM}",
        f"%%restream v2 --log social_small --baseline v1{on}\n{STRICTER}",
        CHECK_REUSE,
    ]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    return nb


@pytest.mark.parametrize("engine", ["serial", "spark"])
def test_sweep_and_reuse_cells_in_a_kernel(engine, tmp_path, monkeypatch):
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / ".restream"))
    monkeypatch.setenv("RESTREAM_DISPLAY", "widgets")
    (tmp_path / "rule.py").write_text(ANTISPAM)
    (tmp_path / "stricter.py").write_text(STRICTER)
    nb = _notebook(engine)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    printed = "".join(
        o.get("text", "")
        for c in nb.cells
        for o in c.get("outputs", [])
        if o.get("name") == "stdout"
    )
    assert f"sweep view checked on {engine}" in printed
    assert "reused 2 stage(s) of v1 (befriend, tally_sender); re-ran 2" in printed, printed
    # The sweep cell showed its widgets: the monitor and the sweep view (a plotly FigureWidget).
    shown = [
        o
        for o in nb.cells[1].get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert len(shown) >= 3, nb.cells[1].get("outputs")
