"""``explain`` (SPEC section 7) on hand-made logs whose answers are known, with windows.

Each case is a rule and an edit of it over a few events placed by hand, so that the row that
differs, the state its emitter read in both runs and the moment those values parted are known
before running anything (said beside each case). The runs may come from either engine:
``explain`` compares them by replaying serially, so every case also runs on runs replayed by
Spark. The same program against itself explains that nothing differs; explain takes the
cells' names and objects, ``Result``s, programs and paths; ``%restream diff A B --explain``.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import restream_kit as rk
from restream_kit.model.errors import RestreamError

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

#: 2026-01-01 00:00:00 UTC, and a second, in milliseconds.
T0 = 1_767_225_600_000
S = 1000


def rows(*events: tuple[int, int, int]) -> list[dict]:
    """Messages ``(ms after T0, src, dst)``, in time order."""
    return [{"ts": T0 + t, "kind": "message", "src": src, "dst": dst} for t, src, dst in events]


#: Three windows, each fed by the messages of one sender, and an edit of each: the sliding
#: window is 5 s wide instead of 10, the tumbling one leaves out messages to user 3, the
#: session closes after 2 s of silence instead of 5.
WINDOWS = """
from restream_kit import emit, on, seconds
from restream_kit.windows import session, sliding, tumbling
recent = sliding(seconds(10), "count")
clicks = tumbling(seconds(10), "count", table="clicks")
visits = session(seconds(5), "count", table="sessions")

@on("message")
def burst(e):
    if e.src == 1:
        recent.add(e.src)
        if recent.value(e.src) >= 4:
            emit("burst", src=e.src, n=recent.value(e.src))

@on("message")
def count(e):
    if e.src == 2:
        clicks.add(e.src)

@on("message")
def visit(e):
    if e.src == 3:
        visits.add(e.src)
"""
EDITED = (
    WINDOWS.replace("sliding(seconds(10)", "sliding(seconds(5)")
    .replace("if e.src == 2:", "if e.src == 2 and e.dst != 3:")
    .replace("session(seconds(5)", "session(seconds(2)")
)
#: lsn: 0-10, in time order. What each row's explanation must say:
#: - sender 1 at 0, 2, 4 and 6 s (lsn 0, 4, 6, 9): with 10 s its 4th message makes a burst
#:   (row burst:9); with 5 s the first has left by then: the timed write that lsn 0 made
#:   (line 11) came due at 5 s, and the counts parted there (3 against 2);
#: - sender 2 at 1, 3, 5 and 12 s (lsn 2, 5, 8, 10): its window [0 s, 10 s) counts 3 against 2;
#:   the row comes from the close its first event scheduled (clicks:2:1:0); the counts parted
#:   at lsn 5, the message to user 3, written by line 18 in the first program only;
#: - sender 3 at 0.5, 1.5 and 4.5 s (lsn 1, 3, 7): one session of 3 closed by the close the
#:   last event scheduled (sessions:7:1:0); with 2 s the close that lsn 3 scheduled ends the
#:   first session at 3.5 s (it deletes the session) and the row is a session of 1.
LOG = rows(
    (0, 1, 7), (500, 3, 1), (1 * S, 2, 1), (1500, 3, 1), (2 * S, 1, 8), (3 * S, 2, 3),
    (4 * S, 1, 9), (4500, 3, 1), (5 * S, 2, 2), (6 * S, 1, 7), (12 * S, 2, 1),
)  # fmt: skip
#: The runs of WINDOWS and EDITED, per engine (replayed once per module).
_RUNS: dict[str, tuple[rk.Result, rk.Result]] = {}


#: The issue's rule: fan-out to distinct recipients in a sliding window; its ``add`` reads the
#: window's entries before adding (8 of them at the 9th recipient), ``value`` after (9).
FANOUT = """
from restream_kit import emit, on, minutes
from restream_kit.windows import sliding
recips = sliding(minutes(10), "distinct")

@on("message")
def fan(e):
    recips.add(e.src, e.dst)
    if recips.value(e.src) > 8:
        emit("fanout", src=e.src, n=recips.value(e.src))
"""
FANOUT_LOG = rows(*((i * S, 5, 100 + i) for i in range(10)))


@pytest.fixture(params=["serial", "spark"])
def runs(request) -> tuple[rk.Result, rk.Result]:
    """WINDOWS and EDITED replayed on the engine (Spark: the session's SparkSession)."""
    if request.param not in _RUNS:
        options = {}
        if request.param == "spark":
            request.getfixturevalue("spark_session")
            options = {"master": "local[2]"}
        log = rk.Log(LOG)
        _RUNS[request.param] = tuple(
            rk.replay(p, log, engine=request.param, **options) for p in (WINDOWS, EDITED)
        )
    return _RUNS[request.param]


def assert_readable(text: str) -> None:
    """User names and datetimes: no generated state name, no millisecond time."""
    assert "__" not in text and str(T0)[:6] not in text, text


def test_the_same_program_against_itself_explains_no_difference(runs, tmp_path):
    for row in ("burst:9", "clicks:2:1:0", "sessions:7:1:0"):
        ex = rk.explain(runs[0], runs[0], row)
        assert not ex.differs and ex.other_fields == ex.fields, row
        assert ex.reads and not any(r.differs for r in ex.reads) and not ex.code
        assert " the same: nothing differs" in ex.text()
        assert_readable(ex.text())


def test_the_issues_fanout_rule_against_itself_explains_no_difference(tmp_path):
    """``rk.explain("fan_8.py", "fan_8.py", ...)``: once said that the add's read (8 entries)
    differed from the value's (9)."""
    (tmp_path / "fan_8.py").write_text(FANOUT)
    path = str(tmp_path / "fan_8.py")
    fan = rk.explain(path, path, "fanout:8", log=rk.Log(FANOUT_LOG))
    assert not fan.differs and not any(r.differs for r in fan.reads)
    entries = [(r.line, len(r.value)) for r in fan.reads]
    assert entries == [(8, 8), (9, 9), (10, 9)]  # add reads before adding, value after
    assert {(r.state, r.part) for r in fan.reads} == {("recips", "entries")}
    text = fan.text()
    assert "recips[5] entries (line 9): 9 entries: 100 at 00:00:00, ..., 108 at 00:00:08" in text
    assert_readable(text)


def test_a_sliding_window_explains_an_entry_that_left_it(runs):
    ex = rk.explain(*runs, "burst:9", labels=("w10", "w5"))
    assert (ex.side, ex.handler, ex.line, ex.fields) == ("a", "burst", 13, {"src": 1, "n": 4})
    assert not ex.other_has_row and ex.ts == T0 + 6 * S
    first, second = ex.reads
    assert (first.state, first.part, first.key, first.line) == ("recent", "count", 1, 12)
    assert (first.value, first.baseline_value, first.paired) == (4, 3, True)
    assert (second.line, second.paired) == (13, False)  # w5 emitted nothing: no such read
    d = first.first_difference
    assert d.timed and d.ts == T0 + 5 * S and (d.value, d.baseline_value) == (3, 2)
    assert d.writes == ()
    assert [(w.handler, w.line, w.lsn, w.due) for w in d.baseline_writes] == [
        ("burst", 11, 0, True)
    ]
    text = ex.text()
    assert "row burst:9:0:0 is in w10, not in w5" in text
    assert "read recent[1] count (line 12): 4 in w10, 3 in w5 [differs]" in text
    assert "when timed writes (at=) came due at 2026-01-01 00:00:05 UTC" in text
    assert "w5: a timed write (at=) made by handler 'burst' line 11 on lsn 0 wrote it" in text
    assert_readable(text)


def test_a_tumbling_window_explains_its_closing_row(runs):
    ex = rk.explain(*runs, "clicks:2:1:0", labels=("all", "not3"))
    assert ex.handler == "clicks__close" and ex.line == 5  # the window's declaration
    assert ex.other_has_row and (ex.fields["value"], ex.other_fields["value"]) == (3, 2)
    (read,) = ex.reads
    assert (read.state, read.part, read.key) == ("clicks", "count", (2, T0))
    assert (read.value, read.baseline_value) == (3, 2)
    d = read.first_difference
    assert (d.lsn, d.seq, d.ts, d.timed) == (5, 0, T0 + 3 * S, False)
    assert [(w.handler, w.line) for w in d.writes] == [("count", 18)] and d.baseline_writes == ()
    text = ex.text()
    assert "in all and, with other fields, in not3: value 3 in all, 2 in not3" in text
    assert "emitted by the close of window 'clicks' line 5 on lsn 2 (scheduled event 1)" in text
    assert "{key: 2, start: 00:00:00, end: 00:00:10, value: 3}" in text
    assert "read clicks[(2, 00:00:00..00:00:10)] count (line 5): 3 in all, 2 in not3" in text
    assert_readable(text)


def test_a_session_window_explains_a_session_closed_earlier(runs):
    ex = rk.explain(*runs, "sessions:7:1:0", labels=("gap5", "gap2"))
    assert ex.handler == "visits__close" and ex.other_has_row
    assert (ex.fields["value"], ex.other_fields["value"]) == (3, 1)
    reads = {r.part: r for r in ex.reads}
    assert not reads["last event"].differs and reads["last event"].value == T0 + 4500
    first = reads["first event"]
    assert (first.state, first.key, first.value, first.baseline_value) == (
        "visits", 3, T0 + 500, T0 + 4500
    )  # fmt: skip
    d = first.first_difference
    assert (d.lsn, d.seq, d.ts) == (3, 1, T0 + 3500)  # the close that lsn 3 scheduled
    assert d.writes == ()
    assert [(w.handler, w.deleted) for w in d.baseline_writes] == [("visits__close", True)]
    assert (reads["count"].value, reads["count"].baseline_value) == (3, 1)
    text = ex.text()
    for said in (
        "read visits[3] first event (line 6): 00:00:00.500 in gap5, 00:00:04.500 in gap2",
        "first differed after lsn 3 (scheduled event 1) at 2026-01-01 00:00:03.500 UTC",
        "gap2: the close of window 'visits' line 6 deleted it",
    ):
        assert said in text, text
    assert_readable(text)


def test_when_every_read_is_the_same_the_answer_is_both_versions_of_the_line():
    stricter = FANOUT.replace("> 8", "> 9")
    ex = rk.explain(FANOUT, stricter, "fanout:8", log=rk.Log(FANOUT_LOG), labels=("v8", "v9"))
    assert ex.differs and not any(r.differs for r in ex.reads)
    assert ex.code == [
        ("v8", 9, "if recips.value(e.src) > 8:"),
        ("v9", 9, "if recips.value(e.src) > 9:"),
    ]
    assert "the difference is in the code\n    v8 line 9: if recips.value(e.src) > 8:" in (
        ex.text()
    )


def test_explain_takes_cells_results_run_names_programs_and_paths(tmp_path, monkeypatch):
    """Every way of naming a run gives the same explanation; a Result without its program
    and a sweep cell are refused in one line."""
    from restream_kit.workbench import BackgroundRun, CellSweep, Workbench

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "messages.parquet"
    pq.write_table(pa.Table.from_pylist(LOG), path)
    (tmp_path / "w10.py").write_text(WINDOWS)
    (tmp_path / "w5.py").write_text(EDITED)
    bench = Workbench()
    w10 = bench.run("w10", WINDOWS, str(path))
    w5 = BackgroundRun(bench, "w5", EDITED, str(path))  # as --background binds it
    program = rk.Program.from_source(EDITED, name="w5")
    said = [
        rk.explain(w10, w5, "burst:9"),
        rk.explain(w10.result, w5.result, "burst:9"),
        rk.explain("w10", "w5", "burst:9"),  # the catalog's runs and their log
        rk.explain(str(tmp_path / "w10.py"), program, "burst:9", log=str(path)),
    ]
    first = said[0].to_dict()
    assert first["reads"][0]["value"] == 4 and first["reads"][0]["other_value"] == 3
    for ex in said[1:]:
        assert ex.to_dict()["reads"] == first["reads"] and ex.fields == said[0].fields
    assert said[0].labels == ("w10", "w5") and said[2].labels[0].startswith("w10 (")
    stored = bench.catalog.load(bench.catalog.latest("w10"))
    with pytest.raises(RestreamError, match="does not say which program made it"):
        rk.explain(stored, w5, "burst:9")
    sweep = CellSweep("s", program, rk.Log(str(path)), "serial", {"x": [1, 2]})
    with pytest.raises(RestreamError, match="s is a sweep"):
        rk.explain(sweep, w5, "burst:9")


def test_the_diff_magic_explains_a_row(shell, tmp_path, capsys):
    path = tmp_path / "messages.parquet"
    pq.write_table(pa.Table.from_pylist(LOG), path)
    # The cell's first line is the magic's: its program's lines are the module's.
    shell.run_cell_magic("restream", f"w10 --log {path}", WINDOWS[1:])
    shell.run_cell_magic("restream", f"w5 --log {path}", EDITED[1:])
    capsys.readouterr()
    shell.run_line_magic("restream", "diff w10 w5 --explain burst:9")
    out = capsys.readouterr().out
    assert "row burst:9:0:0 is in w10, not in w5" in out
    assert "read recent[1] count (line 12): 4 in w10, 3 in w5 [differs]" in out


@pytest.fixture
def shell(root, monkeypatch):
    from IPython.testing.globalipapp import get_ipython

    from widgets.magics import register

    monkeypatch.setenv("RESTREAM_DISPLAY", "text")
    ip = get_ipython()
    ip.run_line_magic("load_ext", "restream_kit")
    register(ip)  # a fresh workbench, whose catalog is under this test's RESTREAM_HOME
    yield ip
    ip.run_line_magic("reset", "-f")
