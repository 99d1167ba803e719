"""A Spark pass's emitted rows travel to the driver as Arrow (``passes._arrow_rows``).

A plain pass that commits no checkpoint's epochs, and a close pass fed narrow rows, build
each table's rows into one Arrow table in the task (from the column blocks of its windows'
closes and written-out emits, ``runtime._window_rows``) and the driver joins them by
position. The tests watch what the driver receives (every ``EMIT`` blob goes through
``_jobs.unpack_emitted``) and require the serial engine's result, table for table, also
where a table must take the way rows went before: fields whose types differ between tasks,
values Arrow would not give back as they were, values no table can hold.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

import pytest
from engine_matrix import assert_ran_as_planned, assert_same_result, social_sample

import restream_kit as rk
from restream_kit.engines.spark.passes import _arrow_rows, _jobs

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")


@pytest.fixture
def received(monkeypatch) -> Counter:
    """What the driver receives of each table: ``(table, "arrow")`` per Arrow blob,
    ``(table, "arrow file")`` per blob naming an Arrow file, ``"rows"`` per blob of pickled
    rows (whose tables it does not tell)."""
    seen: Counter = Counter()
    unpack = _jobs.unpack_emitted

    def watched(blob: bytes, rows: list, columns: dict) -> None:
        if _arrow_rows.is_arrow(blob):
            how = "arrow file" if blob.startswith(_arrow_rows._FILE_TAG) else "arrow"
            seen[(_arrow_rows.read_arrow(blob)[0], how)] += 1
        else:
            seen["rows"] += 1
        unpack(blob, rows, columns)

    monkeypatch.setattr(_jobs, "unpack_emitted", watched)
    return seen


@pytest.mark.spark
@pytest.mark.parametrize("rule", ["windows_keyed", "windows_ip"])
def test_windowed_rules_send_every_table_as_arrow(spark_session, received, rule):
    """Every window of ``windows_keyed`` closes in the sender's pass (its rows, an
    ``on_close`` emit, a threshold emit written out in the loop); ``windows_ip``'s tumbling
    window closes in a pass fed narrow rows."""
    p = rk.Program.from_file(ROOT / "bench" / "programs" / f"{rule}.py")
    log = social_sample()
    want = rk.replay(p, log)
    assert all(t.num_rows for t in want.tables.values())
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, want)
    assert_ran_as_planned(p, got)  # (the stages it calls parallel, in more than one task)
    assert "rows" not in received, received
    assert {table for table, _kind in received} == set(want.tables)


@pytest.mark.spark
def test_large_tables_reach_the_driver_as_arrow_files(spark_session, received, monkeypatch):
    """On a local master a task's table of ``arrow_rows`` rows or more goes to the driver as
    an Arrow file on its disk, not through Spark's JVM (``$RESTREAM_ARROW_FILE_ROWS``
    lowers the default for this small log): the same result, and the files are gone after."""
    from restream_kit.io.log import scratch_dir

    monkeypatch.setenv("RESTREAM_ARROW_FILE_ROWS", "1")
    p = rk.Program.from_file(ROOT / "bench" / "programs" / "windows_keyed.py")
    log = social_sample()
    want = rk.replay(p, log)
    before = set(Path(scratch_dir()).glob("parts-*/*.arrow"))
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, want)
    assert_ran_as_planned(p, got)
    assert {kind for _table, kind in received} == {"arrow file"}, received
    assert {table for table, _kind in received} == set(want.tables)
    assert set(Path(scratch_dir()).glob("parts-*/*.arrow")) <= before


#: Fields typed differently by task (a float for one sender, ints for the others; None but
#: for that sender), a value a part may not hold (a dict: Arrow's struct), next to a window.
MIXED = textwrap.dedent(
    """
    from restream_kit import emit, minutes, on
    from restream_kit.windows import tumbling

    per_sender = tumbling(minutes(10), "count", table="per_sender")


    @on("message")
    def track(e):
        per_sender.add(e.src)
        one = e.src == 856
        emit("numbers", n=1.5 if one else 1, maybe=e.dst if one else None)
        if e.dst % 10 == 7:
            emit("pairs", pair={"src": e.src, "dst": e.dst})
    """
)


@pytest.mark.spark
def test_tables_the_tasks_disagree_on_take_the_rows_way_and_equal_serial(spark_session, received):
    p = rk.Program.from_source(MIXED, "mixed")
    log = social_sample(3000)
    want = rk.replay(p, log)
    numbers = want.tables["numbers"].schema
    assert [str(numbers.field(f).type) for f in ("n", "maybe")] == ["double", "int64"]
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, want)
    # The parts' types joined as the rows' would be (ints and floats, nulls and ints).
    assert received[("per_sender", "arrow")] == received[("numbers", "arrow")] == 3
    assert received["rows"] > 0 and ("pairs", "arrow") not in received


@pytest.mark.spark
def test_quarantined_runs_rows_stay_out_of_the_arrow_tables(spark_session, received):
    """A guarded pass (its rows undone with the runs that raise) sends what stayed: the
    serial engine's guarded loop, over log events (no window, whose closes the pass would
    run in its own queue, as its expansion)."""
    source = (
        MIXED.replace("    per_sender.add(e.src)\n", "")
        .replace(
            "    one = e.src == 856\n",
            "    one = e.src == 856\n    if e.dst % 10 == 3:\n"
            "        emit('numbers', n=2, maybe='x')\n        raise ValueError(e.dst)\n",
        )
        .replace('pair={"src": e.src, "dst": e.dst}', "src=e.src")
    )
    assert source.count("raise ValueError") == 1 and "src=e.src)" in source
    assert "per_sender.add" not in source
    p = rk.Program.from_source(source, "raising")
    log = social_sample(3000)
    want = rk.replay(p, log, on_error="quarantine")
    assert want.quarantine.num_rows > 0
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3, on_error="quarantine")
    assert_same_result(got, want)
    assert got.quarantine.to_pylist() == want.quarantine.to_pylist()
    assert_ran_as_planned(p, got)
    tasks = [n for n in got.metrics.task_events["track"] if n]
    assert len(tasks) > 1 and received[("pairs", "arrow")] == len(tasks), received


@pytest.mark.spark
def test_a_field_no_table_can_hold_fails_as_serially(spark_session):
    """Booleans among numbers: the task sends the rows, the driver reports them as serially."""
    clash = MIXED.replace("1.5 if one else 1", "True if one else 1")
    p = rk.Program.from_source(clash, "clash")
    log = social_sample(3000)
    with pytest.raises(rk.OutputError) as serial_error:
        rk.replay(p, log)
    with pytest.raises(rk.OutputError) as spark_error:
        rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert str(spark_error.value) == str(serial_error.value)


def test_a_part_travels_compressed_and_reads_back_whole():
    """A part's IPC bytes are LZ4-compressed (they cross Spark's JVM twice, and a closed
    window's positions are mostly zeros): far smaller than its columns, read back equal."""
    import numpy as np
    import pyarrow as pa

    n = 40_000
    part = pa.table(
        {
            "key": pa.array(np.arange(n) % 97),
            "value": pa.array(np.ones(n, dtype=np.int64)),
            "_rs_t": pa.array(np.arange(n, dtype=np.int64) // 10),
            "_rs_sub": pa.array([bytes(25)] * n, pa.binary()),
        }
    )
    (blob,) = _arrow_rows.arrow_blobs("closed", part)
    assert len(blob) < part.nbytes / 4, (len(blob), part.nbytes)
    table, back = _arrow_rows.read_arrow(blob)
    assert table == "closed" and back.equals(part)
