"""A log given as a URI on a local master: Spark orders it once on the executors into an ordered
copy in the log cache, and the replay takes the path the plan chooses, reading that copy; the
kernel never reads the log's rows. Results as the serial engine's on the same rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from engine_matrix import assert_same_result

import restream_kit as rk
from restream_kit.engines.spark import _uri_log

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "sample_data" / "social_small.parquet"
PROGRAMS = {
    "antispam": ROOT / "examples" / "antispam.py",  # lowers: the prefix path
    "ordinary": ROOT / "bench" / "programs" / "ordinary.py",  # the passes
}

pytestmark = pytest.mark.spark


@pytest.fixture
def uri_log(tmp_path, monkeypatch):
    """The sample log's first 12,000 events as three Parquet files whose path order is their
    order (equal times across files), as a ``file://`` URI, and as one local file; with a
    fresh log cache."""
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / ".restream"))
    directory = tmp_path / "events"
    directory.mkdir()
    table = pq.read_table(SMALL).slice(0, 12_000)
    pq.write_table(table, tmp_path / "local.parquet")
    cuts = [0, 5_000, 8_000, table.num_rows]
    for i, name in enumerate(["part-a.parquet", "part-b.parquet", "part-c.parquet"]):
        piece = table.slice(cuts[i], cuts[i + 1] - cuts[i])
        pq.write_table(piece, directory / name, row_group_size=2_000)
    return f"file://{directory}", tmp_path / "local.parquet"


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_uri_log_runs_the_planned_path_from_sparks_ordered_copy(
    uri_log, spark_session, monkeypatch, name
):
    uri, local = uri_log
    program = rk.Program.load(PROGRAMS[name])
    log = rk.Log(uri)
    got = rk.replay(program, log, engine="spark", session=spark_session, epoch=4_000)
    assert not log.loaded, "the kernel read the rows of a log given as a URI"
    copies = list(log.cache_dir.glob("*.spark/_manifest.json"))
    assert len(copies) == 1, copies
    want = rk.replay(program, rk.Log(local), epoch=4_000)
    assert_same_result(got, want)
    lowered = all(w.startswith("lowered to columns") for w in got.metrics.path.values())
    assert lowered == (name == "antispam"), got.metrics.path

    # Another replay of the same URI (as in another process) reads the copy: no sort.
    def no_sort(*_args):
        raise AssertionError("the log was ordered again")

    monkeypatch.setattr(_uri_log, "_read", no_sort)
    monkeypatch.setattr(_uri_log, "_BASES", {})
    again = rk.Log(uri)
    assert_same_result(rk.replay(program, again, engine="spark", session=spark_session), want)
    assert not again.loaded


def test_a_file_log_on_the_prefix_path_stays_out_of_the_kernel(uri_log, spark_session):
    """The lowering reads the Parquet statistics of the log's ordered copy (the same facts
    as from its rows), the tasks read the copy, and the driver only the emitted rows'
    ``lsn`` and ``ts``."""
    from restream_kit.compiler.lower import column_facts
    from restream_kit.engines.spark.prefix._driver import _facts

    _uri, local = uri_log
    log = rk.Log(local)
    assert _facts(log) == column_facts(rk.Log(local).table)
    program = rk.Program.load(PROGRAMS["antispam"])
    got = rk.replay(program, log, engine="spark", session=spark_session, epoch=4_000)
    assert not log.loaded, "the kernel read the rows of a log the prefix path ran"
    assert all(w.startswith("lowered to columns") for w in got.metrics.path.values())
    assert_same_result(got, rk.replay(program, rk.Log(local), epoch=4_000))
