"""``%%restream --ts COLUMN --kind NAME``: a log of one's own in a cell, and a handler that
would never run failing the cell in one line before any replay."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

CLICKS = "time,user\n2026-03-01T09:30:01Z,b\n2026-03-01T09:30:00Z,a\n2026-03-01T09:30:02Z,a\n"
COUNT = """\
from restream_kit import emit, on, state

seen = state.Counter()

@on("click")
def count(e):
    seen[e.user] += 1
    emit("counts", user=e.user, n=seen[e.user])
"""


@pytest.fixture
def shell(tmp_path, monkeypatch):
    from IPython.testing.globalipapp import get_ipython

    from widgets.magics import register

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RESTREAM_DISPLAY", "text")
    (tmp_path / "clicks.csv").write_text(CLICKS)
    ip = get_ipython()
    ip.run_line_magic("load_ext", "restream_kit")
    register(ip)  # a fresh workbench, whose catalog is under this test's RESTREAM_HOME
    yield ip
    ip.run_line_magic("reset", "-f")


def test_a_cell_reads_its_own_data_with_ts_and_kind(shell):
    shell.run_cell_magic("restream", "c1 --log clicks.csv --ts time --kind click", COUNT)
    run = shell.user_ns["c1"].wait()
    assert run.ok, run.error
    rows = run.result.tables["counts"].to_pylist()
    assert [(r["user"], r["n"]) for r in rows] == [("a", 1), ("b", 1), ("a", 2)]
    assert rows[0]["ts"] == 1772357400000  # 2026-03-01T09:30:00Z


def test_without_ts_or_kind_the_cell_fails_in_one_line_saying_how(shell):
    with pytest.raises(UsageError) as refused:
        shell.run_cell_magic("restream", "c2 --log clicks.csv", COUNT)
    assert "no 'ts' column (columns: time, user)" in str(refused.value)
    assert "--ts time" in str(refused.value) and "\n" not in str(refused.value)
    # The time column named, but no kind: the handler on "click" would never run.
    with pytest.raises(UsageError) as idle:
        shell.run_cell_magic("restream", "c3 --log clicks.csv --ts time", COUNT)
    message = str(idle.value)
    assert message.startswith("<restream c3>:6: no 'click' events in the log: handler(s) count")
    assert "(the log's kinds: 'event')" in message and "--kind click" in message
    assert "\n" not in message and "c3" not in shell.user_ns
