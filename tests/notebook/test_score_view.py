"""``%%restream NAME --labels FILE --by FIELD`` (issue 35) in a real IPython shell: a run's
scores beside its baseline's, the keys that changed class with their explain buttons, and a
sweep's precision-recall plot whose click opens the variant in the sweep view."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from plotly.callbacks import Points

from restream_kit.iterate.score import changed_keys, pareto_front, score, score_sweep

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from iterate.test_iterate import ANTISPAM  # noqa: E402 - the swept anti-spam rule

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

LOG = "social_small"
LABELS = "--labels social_small_labels --by sender"
STRICTER = ANTISPAM.replace('param("ratio", 2.0)', 'param("ratio", 3.0)')


@pytest.fixture
def shell(root, monkeypatch):
    from IPython.testing.globalipapp import get_ipython

    from widgets.magics import register

    monkeypatch.chdir(root)
    monkeypatch.setenv("RESTREAM_DISPLAY", "text")
    ip = get_ipython()
    ip.run_line_magic("load_ext", "restream_kit")
    register(ip)  # a fresh workbench, whose catalog is under this test's RESTREAM_HOME
    yield ip
    ip.run_line_magic("reset", "-f")


def test_a_cell_with_labels_scores_itself_beside_its_baseline(shell, capsys):
    from widgets.score_view import ScoreView, show_scores

    shell.run_cell_magic("restream", f"v1 --log {LOG} {LABELS}", ANTISPAM)
    shell.run_cell_magic("restream", f"v2 --log {LOG} --baseline v1 {LABELS}", STRICTER)
    out = capsys.readouterr().out
    v1, v2 = shell.user_ns["v1"], shell.user_ns["v2"]
    s1 = score(v1.result, "social_small_labels", by="sender")
    s2 = score(v2.result, "social_small_labels", by="sender")
    assert f"v2: {s2['spam'].summary()}" in out and f"v1: {s1['spam'].summary()}" in out
    assert s2["spam"].fp < s1["spam"].fp  # the stricter rule raises fewer false alarms
    changes = changed_keys(s2, s1)
    assert "keys that changed class: " in out and "false alarm gone" in out
    # The widgets: both sides in one table, the changed keys with an explain button each.
    shown: list = []
    view = show_scores(shell.magics_manager.registry["RestreamMagics"].workbench, v2,
                       "social_small_labels", "sender", display=shown.append)  # fmt: skip
    assert isinstance(view, ScoreView) and shown == [view.widget]
    assert view.table.value.count("<i>spam</i>") == 2
    assert f">{v2.baseline.label}<br>" in view.table.value and v2.baseline.label.startswith("v1")
    assert f"{s2['spam'].precision:.3f}" in view.table.value
    assert view.changes.equals(changes) and len(view.buttons) == min(12, changes.height)
    first = changes.row(0, named=True)
    found = view.explain_row(first["first_row"])
    assert str(found.row) == first["first_row"] and found.text()


def test_bad_labels_fail_the_cell_before_the_replay(shell):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="no key column 'nobody'"):
        shell.run_cell_magic("restream", f"v9 --log {LOG} --labels social_small_labels --by nobody", ANTISPAM)  # fmt: skip
    with pytest.raises(UsageError, match="--labels needs --by"):
        shell.run_cell_magic("restream", f"v9 --log {LOG} --labels social_small_labels", ANTISPAM)
    assert "v9" not in shell.user_ns


def test_a_sweep_with_labels_plots_precision_against_recall_and_a_click_opens_the_variant(
    shell, capsys
):
    from widgets.score_view import ParetoView
    from widgets.sweep_view import SweepView

    shell.run_cell_magic("restream", f"v3 --log {LOG} --sweep ratio=1,2,4 {LABELS}", ANTISPAM)
    cell = shell.user_ns["v3"]
    out = capsys.readouterr().out
    assert "ratio=1: spam: precision " in out and "on the Pareto front" in out
    frame = score_sweep(cell.sweep, "social_small_labels", "sender")
    for v, row in zip(cell.variants, frame.iter_rows(named=True)):
        want = score(v.result, "social_small_labels", "sender")  # variants = replays: tested
        assert (row["precision"], row["recall"]) == (want["spam"].precision, want["spam"].recall)
    assert frame["pareto"].to_list() == pareto_front(frame["precision"], frame["recall"])
    sweep_view = SweepView()
    sweep_view.finish(cell)
    view = ParetoView(frame, sweep_view.select)
    points, front = view.figure.data
    assert list(points.x) == frame["recall"].to_list()
    assert [s == "diamond" for s in points.marker.symbol] == frame["pareto"].to_list()
    assert len(front.x) == sum(frame["pareto"])
    shown = view.on_plot_click(
        points, Points(point_inds=[2], xs=[points.x[2]], ys=[points.y[2]], trace_name="spam", trace_index=0)
    )  # fmt: skip
    assert view.selected == 2 and sweep_view.selected == 2
    assert shown.summary() == cell.diff(2).summary()
