"""``%%restream NAME --sweep ...`` and ``%%restream v2 --baseline v1`` (re-replay) as cells, on
the serial engine and on Spark.

In-process here (a real IPython shell, the shared SparkSession): every variant of a sweep cell
equals its own serial replay, the sweep view draws those rows and a click on a variant shows
its diff against the baseline; a ``--baseline`` cell reuses the baseline's stages and its result
equals a full replay. ``test_iterate_notebook.py`` runs the same cells in a kernel.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from plotly.callbacks import Points

import restream_kit as rk
from restream_kit.io.compare import diff

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from iterate.test_iterate import ANTISPAM  # noqa: E402 - the swept anti-spam rule

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

LOG = "social_small"
#: The same rule with a higher final threshold: only ``flag`` changes.
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


@pytest.fixture(params=["serial", "spark"])
def engine(request):
    if request.param == "spark":
        request.getfixturevalue("spark_session")
    return request.param


def assert_same(got: rk.Result, want: rk.Result) -> None:
    assert sorted(got.tables) == sorted(want.tables)
    for name, table in want.tables.items():
        assert got.tables[name].equals(table), name
    assert got.state == want.state


def spark_options(engine: str) -> str:
    return " --engine spark --master local[2]" if engine == "spark" else ""


def test_a_sweep_cell_equals_its_replays_and_a_click_shows_a_variants_diff(shell, engine, capsys):
    from widgets.sweep_view import SweepView

    shell.run_cell_magic(
        "restream", f"v3 --log {LOG} --sweep ratio=1.5,2,3{spark_options(engine)}", ANTISPAM
    )
    out = capsys.readouterr().out
    cell = shell.user_ns["v3"]
    assert cell.ok and cell.engine == engine and cell.sweep.single_scan
    assert "swept 3 variants of v3" in out and "[2] ratio=3:" in out
    replays = [rk.replay(ANTISPAM, LOG, params=v.params) for v in cell.variants]
    for variant, want in zip(cell.variants, replays):
        assert_same(variant.result, want)
    counts = [r.metrics.rows["spam"] for r in replays]
    assert len(set(counts)) == 3  # the thresholds matter, so the lines below could fail

    # The view: one line (spam) against ratio, the same counts as the replays.
    view = SweepView()
    view.finish(cell)
    (trace,) = view.figure.data
    assert trace.type == "scatter" and list(trace.x) == [1.5, 2, 3]
    assert list(trace.y) == counts
    # A click on the point ratio=3 shows variant 2's diff against the default-params replay.
    baseline = rk.replay(ANTISPAM, LOG)
    shown = view.on_plot_click(
        trace, Points(point_inds=[2], xs=[3], ys=[counts[2]], trace_name="spam", trace_index=0)
    )
    want = diff(replays[2], baseline)
    assert shown.summary() == want.summary() and not want.empty
    assert view.selected == 2 and "removed" in view.diff_view.counts.value
    assert f"{want.tables['spam'].counts['removed']:,}" in view.diff_view.counts.value
    # The default's variant is the baseline itself: its button shows an empty diff.
    view.buttons[1].click()
    assert view.selected == 1 and cell.diff(1).empty
    assert "identical" in view.diff_view.header.value


def test_two_swept_parameters_draw_a_heatmap_whose_cells_open_their_diff(shell, capsys):
    from widgets.sweep_view import SweepView

    shell.run_cell_magic(
        "restream", f"v4 --log {LOG} --sweep ratio=1.5,3 --sweep share=0.1,0.2", ANTISPAM
    )
    cell = shell.user_ns["v4"]
    assert [v.params for v in cell.variants] == [
        {"ratio": r, "share": s} for r in (1.5, 3) for s in (0.1, 0.2)
    ]
    view = SweepView()
    view.finish(cell)
    (heat,) = view.figure.data
    assert (
        heat.type == "heatmap" and list(heat.x) == ["1.5", "3"] and list(heat.y) == ["0.1", "0.2"]
    )
    for v in cell.variants:
        want = rk.replay(ANTISPAM, LOG, params=v.params).metrics.rows["spam"]
        col, row = [1.5, 3].index(v.params["ratio"]), [0.1, 0.2].index(v.params["share"])
        assert heat.z[row][col] == want
    # The cell ratio=3, share=0.1 (row 0, column 1) is variant 2.
    shown = view.on_plot_click(
        heat, Points(point_inds=[[0, 1]], xs=["3"], ys=["0.1"], trace_name="spam", trace_index=0)
    )
    assert view.selected == 2
    assert shown.summary() == diff(cell.variants[2].result, rk.replay(ANTISPAM, LOG)).summary()


def test_a_sweep_cell_rejects_an_unknown_parameter_in_one_line(shell):
    from IPython.core.error import UsageError

    with pytest.raises(
        UsageError,
        match=r"^<restream v5>: --sweep: v5 declares no parameter 'nope' \(its parameters: ratio, share\)",
    ):
        shell.run_cell_magic("restream", f"v5 --log {LOG} --sweep nope=1,2", ANTISPAM)
    assert "v5" not in shell.user_ns
    with pytest.raises(UsageError, match="--sweep 'ratio': expected NAME=V1,V2"):
        shell.run_cell_magic("restream", f"v5 --log {LOG} --sweep ratio", ANTISPAM)


def test_a_baseline_cell_re_replays_only_what_changed_and_equals_a_full_replay(
    shell, engine, capsys
):
    shell.run_cell_magic("restream", f"v1 --log {LOG}", ANTISPAM)
    capsys.readouterr()
    shell.run_cell_magic(
        "restream", f"v2 --log {LOG} --baseline v1{spark_options(engine)}", STRICTER
    )
    out = capsys.readouterr().out
    cell = shell.user_ns["v2"]
    assert cell.ok, cell.error
    reuse = cell.reuse
    assert reuse["reused_run"] == "v1" and reuse["reuse_reason"] is None
    assert reuse["reused_stages"] == ["befriend", "tally_sender"], reuse
    assert "flag" in reuse["rerun_stages"] and "befriend" not in reuse["rerun_stages"]
    assert "reused 2 stage(s) of v1 (befriend, tally_sender)" in out and "saved" in out
    full = rk.replay(STRICTER, LOG)
    assert_same(cell.result, full)
    # The widgets' monitor says the same under its bars.
    from widgets.monitor import ReplayMonitor

    monitor = ReplayMonitor("v2")
    monitor.finish(cell)
    assert "reused 2 stage(s) of v1 (befriend, tally_sender)" in monitor.reuse_note.value
    # The diff against v1 is the diff of two full replays.
    assert cell.diff.summary() == diff(full, rk.replay(ANTISPAM, LOG)).summary()

    # --no-reuse replays in full, to the same result.
    shell.run_cell_magic(
        "restream", f"v2 --log {LOG} --baseline v1 --no-reuse{spark_options(engine)}", STRICTER
    )
    again = shell.user_ns["v2"]
    assert again.reuse is None and "reused" not in capsys.readouterr().out
    assert_same(again.result, full)


def test_a_baseline_cell_records_the_reused_states_and_probes_as_links_to_its_baselines(
    shell, tmp_path
):
    """Recording a reusing cell links its baseline's files for what it reused (neither
    encoded nor written again), and the run reads back as the full replay, history too."""
    from restream_kit.history.recorder import History

    shell.run_cell_magic("restream", f"v1 --log {LOG}", ANTISPAM)
    shell.run_cell_magic("restream", f"v2 --log {LOG} --baseline v1", STRICTER)
    v1, v2 = shell.user_ns["v1"], shell.user_ns["v2"]
    assert v2.ok and v2.reuse["reused_stages"], v2.reuse
    old, new = Path(v1.record.outputs), Path(v2.record.outputs)

    def inodes(run: Path, folder: str) -> set[int]:
        return {f.stat().st_ino for f in (run / folder).rglob("*.parquet")}

    # friends, to_friends, to_strangers: the states of the two reused stages.
    assert len(inodes(old, "state") & inodes(new, "state")) == 3
    assert inodes(old, "history") & inodes(new, "history")
    stored = History.read(new)
    assert stored is not None and stored.probes == v2.result.history.probes
    assert_same(v2.result, rk.replay(STRICTER, LOG))
    # A cell on top of the linked run reuses it and still equals a full replay.
    shell.run_cell_magic("restream", f"v3 --log {LOG} --baseline v2", ANTISPAM)
    v3 = shell.user_ns["v3"]
    assert v3.ok and v3.reuse["reused_stages"], v3.reuse
    assert_same(v3.result, rk.replay(ANTISPAM, LOG))


def test_a_baseline_cell_that_cannot_reuse_says_why_in_one_line(shell, capsys):
    shell.run_cell_magic("restream", f"v1 --log {LOG}", ANTISPAM)
    shell.run_cell_magic("restream", f"v2 --log {LOG} --baseline v1 --on-error skip", STRICTER)
    out = capsys.readouterr().out
    cell = shell.user_ns["v2"]
    assert cell.reuse["reused_stages"] == []
    lines = [ln for ln in out.splitlines() if ln.startswith("nothing reused from v1")]
    assert lines == [
        "nothing reused from v1: on_error is not 'stop' (rolled back runs would have to be "
        "redone); replayed in full"
    ], out
    assert_same(cell.result, rk.replay(STRICTER, LOG, on_error="skip"))


def test_a_heatmap_of_several_tables_has_a_menu_that_redraws_it(root, tmp_path):
    from restream_kit.io.catalog import Catalog
    from restream_kit.workbench import Workbench
    from widgets.sweep_view import SweepView

    two_tables = ANTISPAM.replace(
        'emit("spam", sender=e.src)',
        'emit("spam", sender=e.src)\n    else:\n        emit("ok", sender=e.src)',
    )
    bench = Workbench(Catalog(tmp_path / "catalog"))
    cell = bench.sweep(
        "s", two_tables, str(root / "sample_data/social_small.parquet"),
        values={"ratio": [1.5, 3], "share": [0.1, 0.2]},
    )  # fmt: skip
    assert cell.ok, cell.error
    view = SweepView()
    view.finish(cell)
    assert view.table_picker.options == ("ok", "spam") and view.table_picker.value == "ok"
    rows = cell.rows()
    for table in ("ok", "spam"):
        view.table_picker.value = table
        (heat,) = view.figure.data
        assert heat.name == table
        # A row per share, a column per ratio.
        want = [
            [rows.filter(ratio=r, share=sh)[table].item() for r in (1.5, 3)] for sh in (0.1, 0.2)
        ]
        assert [list(line) for line in heat.z] == want


# A stage that reads and writes its own state under a key looked up in state: the plan calls
# it sequential (one task); the stage reading that state by the looked-up key stays parallel.
ONE_TASK = """\
from restream_kit import emit, on, state

team_of = state.Map(default=None)
team_msgs = state.Counter()


@on("message")
def charge(e):
    team_of[e.src] = e.dst % 7
    if team_msgs[team_of[e.src]] < 500:
        team_msgs[team_of[e.src]] += 1


@on("message")
def over_quota(e):
    if team_msgs[team_of[e.src]] > 100:
        emit("over_quota", sender=e.src)
"""


def test_a_spark_cell_says_how_each_stage_will_run_before_the_replay(shell, capsys):
    from widgets.plan_view import PlanView

    shell.run_cell_magic("restream", f"teams --log {LOG}{spark_options('spark')}", ONE_TASK)
    out = capsys.readouterr().out
    said = out.split("On spark, before the replay:", 1)[1]
    cell = shell.user_ns["teams"]
    assert cell.ok
    # Said before the replay, and then what ran.
    assert said.splitlines()[1].startswith("  charge: sequential in one task: ")
    path = cell.result.metrics.path
    assert path["charge"].startswith("sequential in one task"), path
    assert path["over_quota"].startswith("parallel over"), path
    layout = ("spark", {"charge": "sequential in one task: a reason"})
    view = PlanView(rk.plan(rk.Program.from_source(ONE_TASK, "teams")), "teams", layout)
    summary = view.summary
    assert "<b>on spark</b>" in summary and "color:#b00'>charge: sequential in one task" in summary
