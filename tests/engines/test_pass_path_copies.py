"""The pass path reads the log's ordered copy on the executors: a file log's, or the one Spark
wrote of a ``file://`` log. The kernel never builds the log's table (``Log.table`` raises
here), whether the passes' events are arranged from the copy by the executors or shuffled
by Spark; every result is the serial engine's on the same rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from engine_matrix import assert_same_result, keep_first_epochs

import restream_kit as rk
from restream_kit.engines.spark import _uri_log
from restream_kit.engines.spark.passes import _local_arrangement, _setup
from restream_kit.io.log import Log

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "sample_data" / "social_small.parquet"
ORDINARY = ROOT / "bench" / "programs" / "ordinary.py"
BOUNDED = ROOT / "bench" / "programs" / "bounded_state.py"
EPOCH = 3_000

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """The sample log's first 12,000 events as a ``file://`` directory of two files and as
    one local file, with one log cache for the module (Spark sorts the URI log once)."""
    root = tmp_path_factory.mktemp("copies")
    table = pq.read_table(SMALL).slice(0, 12_000)
    local = root / "local.parquet"
    pq.write_table(table, local)
    directory = root / "events"
    directory.mkdir()
    pq.write_table(table.slice(0, 7_000), directory / "a.parquet", row_group_size=2_000)
    pq.write_table(table.slice(7_000), directory / "b.parquet", row_group_size=2_000)
    return root


@pytest.fixture
def logs(shared, monkeypatch):
    monkeypatch.setenv("RESTREAM_HOME", str(shared / ".restream"))
    return {"uri": f"file://{shared / 'events'}", "file": str(shared / "local.parquet")}


def _no_table(monkeypatch) -> None:
    def refuse(self):
        raise AssertionError(f"the kernel read the whole log {self!r}")

    monkeypatch.setattr(Log, "_load", refuse)


@pytest.mark.parametrize("arranged", [True, False], ids=["arranged", "shuffled"])
@pytest.mark.parametrize("form", ["uri", "file"])
def test_the_pass_path_reads_the_copy_never_the_table(
    logs, spark_session, monkeypatch, form, arranged
):
    program = rk.Program.load(ORDINARY)
    want = rk.replay(program, rk.Log(logs["file"]))
    monkeypatch.setattr(_local_arrangement, "LOCAL_ROWS", 100 if arranged else 10**9)
    _no_table(monkeypatch)
    got = rk.replay(program, rk.Log(logs[form]), engine="spark", session=spark_session)
    assert_same_result(got, want)
    paths = got.metrics.path
    assert all(w.startswith("parallel over") for w in paths.values()), paths
    assert all(("arranged by the driver" in w) == arranged for w in paths.values()), paths
    if arranged:
        # Kept on disk: another replay (as in another process) maps the same files.
        scratch = Path(logs["file"]).parent / ".restream" / "scratch"
        made = sorted(scratch.glob("*.arranged/_parts.json"))
        assert made, list(scratch.iterdir())
        stamps = [p.stat().st_ino for p in made]
        _local_arrangement._FILES.clear()
        again = rk.replay(program, rk.Log(logs[form]), engine="spark", session=spark_session)
        assert_same_result(again, want)
        assert [p.stat().st_ino for p in sorted(scratch.glob("*.arranged/_parts.json"))] == stamps


def test_a_checkpointed_pass_path_from_a_uri_log_commits_and_resumes_as_serial(
    logs, spark_session, monkeypatch, tmp_path
):
    program = rk.Program.load(ORDINARY)
    want = rk.replay(program, rk.Log(logs["file"]), epoch=EPOCH)
    monkeypatch.setattr(_local_arrangement, "LOCAL_ROWS", 100)
    _no_table(monkeypatch)
    ck = tmp_path / "ck"
    options = dict(engine="spark", session=spark_session, epoch=EPOCH, checkpoint=ck)
    got = rk.replay(program, rk.Log(logs["uri"]), **options)
    assert_same_result(got, want)
    keep_first_epochs(ck, 2)
    resumed = rk.replay(program, rk.Log(logs["uri"]), **options, resume=True)
    assert resumed.resumed_from_epoch == 2
    assert_same_result(resumed, want)


def test_keys_are_dealt_largest_first_into_partitions_numbered_by_size():
    """A heavy key gets a partition of its own; the partitions are numbered by size; a key
    the deal has not seen has none."""
    import numpy as np

    hashes = np.array([5, 9, 1, 7, 3], dtype=np.uint64)
    counts = np.array([2, 50, 3, 4, 1])
    deal = _local_arrangement.dealt(hashes, counts, 2)
    parts = dict(zip(hashes.tolist(), deal.of(hashes).tolist()))
    assert parts[9] == 0 and {parts[h] for h in (5, 1, 7, 3)} == {1}
    assert deal.of(np.array([2, 9], dtype=np.uint64)).tolist() == [-1, 0]


def test_a_uri_log_s_passes_read_spark_s_copy_as_a_path_log_s_read_the_duckdb_copy(
    shared, spark_session, monkeypatch, tmp_path
):
    """A URI log's pass jobs read the files of Spark's ordered copy, as a path log's read its
    DuckDB copy: no cache of the log's rows is built; and Spark's copy is in row groups of at
    most ``ROW_GROUP`` rows, as the DuckDB copy is. Before, the URI log's frame was persisted,
    every replay building a cache of the whole log (1.5x the path form's wall at 10M events),
    and Spark's row groups held 1.15M rows (docs/scale.md)."""
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path))  # Spark writes its copy here, anew
    monkeypatch.setattr(_uri_log, "ROW_GROUP", 1_000)
    for module, name in ((_setup, "_FRAMES"), (_uri_log, "_BASES"), (_uri_log, "_FACTS")):
        monkeypatch.setattr(module, name, {})  # (the earlier tests' frames, of other copies)
    program = rk.Program.load(BOUNDED)
    want = rk.replay(program, rk.Log(shared / "local.parquet"))
    _no_table(monkeypatch)
    for form in (str(shared / "local.parquet"), f"file://{shared / 'events'}"):
        log = rk.Log(form)
        got = rk.replay(program, log, engine="spark", session=spark_session)
        assert_same_result(got, want)
        assert all("sequential" in w for w in got.metrics.path.values()), got.metrics.path
        df, read_from = _setup._FRAMES[(id(spark_session), log.fingerprint)]
        assert read_from == str(log.ordered().path)
        assert not df.is_cached
        assert "InMemoryRelation" not in df._jdf.queryExecution().optimizedPlan().toString()
    copy = log.ordered()
    sizes = [copy.starts[i + 1] - copy.starts[i] for i in range(len(copy.groups))]
    assert copy.path.name.endswith(".spark") and max(sizes) <= 1_000 and len(sizes) >= 12, sizes
