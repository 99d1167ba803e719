"""Large output tables on Spark: written by the tasks as Parquet, read when asked.

``result_rows=0`` makes every table large: each task writes its rows as a part file, the
driver merges the parts into one file in processing order, and the result holds the file
(``result.tables`` reads it on access). The tables equal the serial engine's, row for row
and type for type, and the rows were never sent to the driver: the result holds files.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from engine_matrix import assert_same_result, social_sample

import restream_kit as rk
from restream_kit.io._table_files import TableFiles, Tables

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")]

#: Tables of every shape a task meets: a field int for some senders and float for others
#: (doubles, as one table of them is), lists empty in some tasks only (the general way),
#: rows emitted by scheduled events, two tables from one handler run.
MIXED = textwrap.dedent(
    """
    from restream_kit import emit, on, schedule, state

    n = state.Counter()

    @on("message")
    def count(e):
        n[e.src] += 1
        emit("counts", sender=e.src, n=n[e.src] / 2 if e.src % 3 == 0 else n[e.src])
        emit("lists", sender=e.src, xs=[n[e.src]] if e.src == 12 else [])
        if n[e.src] % 4 == 0:
            schedule("ping", at=e.ts + 1000, src=e.src)

    @on("ping")
    def pong(e):
        emit("pongs", src=e.src, at=e.ts)
    """
)


def _files_of(result: rk.Result) -> dict[str, TableFiles]:
    assert isinstance(result.tables, Tables), type(result.tables)
    return {name: result.tables.files(name) for name in result.tables}


def test_tables_written_by_the_tasks_equal_serial_and_are_read_when_asked(spark_session):
    program = rk.Program.from_file(ROOT / "bench/programs/ordinary.py")
    log = social_sample(6000)
    want = rk.replay(program, log)
    got = rk.replay(program, log, engine="spark", path="passes", partitions=3, result_rows=0)
    files = _files_of(got)
    assert set(files) == set(want.tables) and all(files.values()), files
    table = files["suspicious"]
    assert table.num_rows == want.tables["suspicious"].num_rows > 0
    assert got.metrics.rows == want.metrics.rows
    assert_same_result(got, want)
    # Lazily: a polars scan of the file, the same frame as result[name], a head of it.
    assert got.lazy("suspicious").collect().equals(got["suspicious"])
    assert table.head(3).to_pylist() == want.tables["suspicious"].slice(0, 3).to_pylist()
    assert "suspicious: " in repr(got) and got.summary()["tables"] == want.summary()["tables"]


def test_tables_of_every_shape_equal_serial(spark_session):
    program = rk.Program.from_source(MIXED)
    log = social_sample(4000)
    want = rk.replay(program, log)
    got = rk.replay(program, log, engine="spark", path="passes", partitions=3, result_rows=0)
    assert_same_result(got, want)
    assert str(want.tables["counts"].schema.field("n").type) == "double"
    files = _files_of(got)
    assert files["counts"] is not None and files["pongs"] is not None
    # Lists of one sender's counts, empty elsewhere: the parts' types disagree (a list of
    # nothing in most tasks), so the table is built from their rows, in memory.
    assert files["lists"] is None


def test_small_tables_stay_in_memory_and_files_are_copied_on_write(spark_session, tmp_path):
    program = rk.Program.from_file(ROOT / "bench/programs/ordinary.py")
    log = social_sample(3000)
    small = rk.replay(program, log, engine="spark", path="passes", partitions=2)
    assert not isinstance(small.tables, Tables)  # under 1,000,000 rows: as before
    big = rk.replay(program, log, engine="spark", path="passes", partitions=2, result_rows=0)
    written = big.write(tmp_path / "out")
    assert pq.read_table(written["suspicious"]).equals(small.tables["suspicious"])
    held = big.tables.files("suspicious").path
    del big
    assert not Path(held).exists()  # the file goes with the result


# -- the prefix path (a rule that lowers to columns) -----------------------------------------

#: Lowered tables of several shapes: ``counts`` from two emit sites in different rounds (an
#: int field in one, a float in the other: doubles), ``links`` with a field None in every row
#: (typed null), ``flags`` from one site.
LOWERED = textwrap.dedent(
    """
    from restream_kit import emit, on, state

    n = state.Counter()
    emails = state.Counter()

    @on("message")
    def count(e):
        n[e.src] += 1
        emit("counts", sender=e.src, n=n[e.src], big=n[e.src] > 3)

    @on("message")
    def half(e):
        if e.has_email:
            emails[e.src] += 1
            emit("counts", sender=e.src, n=0.5, big=e.has_email)
            emit("flags", ip=e.ip, many=emails[e.src] > 2, who=e.src)

    @on("friendship")
    def link(e):
        emit("links", a=e.src, b=e.dst, ip=e.ip)
    """
)


def _lowered(result: rk.Result) -> bool:
    return all("lowered to columns" in how for how in result.metrics.path.values())


def test_prefix_path_tables_written_by_the_tasks_equal_serial(spark_session):
    program = rk.Program.from_source(LOWERED)
    log = social_sample(3000)
    want = rk.replay(program, log)
    got = rk.replay(program, log, engine="spark", path="prefix", epoch=700, result_rows=0)
    assert _lowered(got), got.metrics.path
    files = _files_of(got)
    assert set(files) == set(want.tables) and all(files.values()), files
    assert_same_result(got, want)
    assert str(files["counts"].schema.field("n").type) == "double"
    assert str(got.tables["links"].schema.field("ip").type) == "null"
    # Fields of one type in each round's parts but not across them (int, then bool): the
    # parts are read back and the table built from the rows, which fails as serial does.
    clash = LOWERED.replace("n=0.5", "n=e.has_email")
    with pytest.raises(rk.OutputError) as serial_error:
        rk.replay(rk.Program.from_source(clash), log)
    with pytest.raises(rk.OutputError) as spark_error:
        rk.replay(rk.Program.from_source(clash), log, engine="spark", path="prefix", result_rows=0)
    assert str(spark_error.value) == str(serial_error.value)


def test_prefix_path_large_table_is_file_held_and_loads_the_same_rows(spark_session, monkeypatch):
    program = rk.Program.from_file(ROOT / "bench/programs/lowered_per_event.py")
    log = social_sample(6000)
    want = rk.replay(program, log)
    small = rk.replay(program, log, engine="spark", path="prefix", epoch=2500)
    assert not isinstance(small.tables, Tables)  # under 1,000,000 rows: as before
    # Epochs of 2,500, 2,500 and 1,000 events: two tasks write their rows as part files,
    # the last sends its fewer rows; the driver merges them into one file.
    monkeypatch.setenv("RESTREAM_RESULT_ROWS", "1500")
    got = rk.replay(program, log, engine="spark", path="prefix", epoch=2500)
    assert _lowered(got), got.metrics.path
    held = _files_of(got)["counts"]
    assert held is not None and held.num_rows == want.tables["counts"].num_rows > 3000
    assert got.metrics.rows == want.metrics.rows
    assert_same_result(got, want)
    assert got["counts"].equals(small["counts"])
    assert got.lazy("counts").collect().equals(got["counts"])


# -- checkpointed replays: their tables read back from the commits ---------------------------


def _killed_after(ck: Path, epochs: int) -> None:
    """The checkpoint ``ck`` as a replay killed after its ``epochs``-th commit leaves it: the
    manifest names the epochs before (the later epochs' folders are written again)."""
    manifest = json.loads((ck / "manifest.json").read_text())
    manifest["epochs"], manifest["complete"] = manifest["epochs"][:epochs], False
    (ck / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("path", ["passes", "prefix"])
def test_checkpointed_and_resumed_tables_are_read_back_from_the_commits(
    path, tmp_path, spark_session
):
    # The pass path's ``counts`` has ints and floats in each epoch (its epochs' rows are kept
    # as JSON, typed doubles together); the prefix path's epochs' rows are typed columns in
    # the checkpoint.
    program = rk.Program.from_source(MIXED if path == "passes" else LOWERED)
    log = social_sample(6000)
    want = rk.replay(program, log)
    ck = tmp_path / "ck"
    options = dict(engine="spark", path=path, epoch=1000, checkpoint=ck, result_rows=1500)
    got = rk.replay(program, log, checkpoint_every=2500, **options)
    assert "waves" in got.metrics.path["checkpoint"], got.metrics.path
    ran = {stage: how for stage, how in got.metrics.path.items() if stage != "checkpoint"}
    assert all(how.startswith("lowered") == (path == "prefix") for how in ran.values()), ran
    big = {name for name, table in want.tables.items() if table.num_rows >= 1500}
    held = {name for name, files in _files_of(got).items() if files is not None}
    assert held == big and held, (held, big)
    assert got.metrics.rows == want.metrics.rows
    assert_same_result(got, want)
    # Killed after its second commit: the resume reads the first two epochs' rows from the
    # checkpoint, as the whole replay read all of them.
    _killed_after(ck, 2)
    resumed = rk.replay(program, log, resume=True, **options)
    assert resumed.resumed_from_epoch == 2
    assert {n for n, f in _files_of(resumed).items() if f is not None} == held
    assert_same_result(resumed, want)
    for name in held:
        assert resumed.lazy(name).collect().equals(got[name])
    # Under ``result_rows`` (1,000,000 by default) every table is read back into memory.
    options = {**options, "checkpoint": tmp_path / "ck2", "result_rows": None}
    small = rk.replay(program, log, **options)
    assert "tables read back from the checkpoint (driver)" in small.metrics.stages
    assert not isinstance(small.tables, Tables) and small.metrics.rows == want.metrics.rows
    assert_same_result(small, want)
