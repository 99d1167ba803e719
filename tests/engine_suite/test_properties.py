"""Property tests: random programs and logs, the engines against the naive interpreter, and the
Spark engine against the serial engine."""

from __future__ import annotations

import os
import re

import pytest
from engine_matrix import (
    assert_ran_as_planned,
    assert_same_commits,
    assert_same_result,
    keep_first_epochs,
    rows_of,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from naive import events, programs, render, run_naive, spark_cases

import restream_kit as rk
from restream_kit.io.result import ROW_COLUMNS

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

EXAMPLES = int(os.environ.get("RESTREAM_PROPERTY_EXAMPLES", "200"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=programs(), log=events)
def test_serial_engine_equals_the_naive_interpreter(spec, log):
    program = rk.Program.from_source(render(spec), name="prop")
    result = rk.replay(program, rk.Log(log), require_kinds=False)
    want_rows, want_state = run_naive(spec, log)
    got = rows_of(result, "out")
    assert len(got) == len(want_rows)
    for row, (lsn, handler, fields) in zip(got, want_rows):
        assert (row["lsn"], row["handler"]) == (lsn, handler)
        assert {k: row[k] for k in fields} == fields
        assert all(row[k] is None for k in row if k not in fields and k not in ROW_COLUMNS)
    assert result.state == want_state


# -- the Spark engine against the serial engine --------------------------------------------------

SPARK_EXAMPLES = int(os.environ.get("RESTREAM_SPARK_PROPERTY_EXAMPLES", str(EXAMPLES)))


@settings(max_examples=SPARK_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=spark_cases())
def test_spark_engine_equals_the_serial_engine(case, spark_session):
    # A known gap with a strict xfail of its own (tests/engines/test_resume_timed_adds.py): a
    # state with timed writes, copied whole to a pass fed scheduled events, misses them.
    assume(not (TIMED_WRITE.search(case[0]) and "schedule(" in case[0]))
    source, log, epoch, path = case
    program = rk.Program.from_source(source, name="prop")
    the_log = rk.Log(log)
    want = rk.replay(program, the_log, require_kinds=False)
    got = rk.replay(
        program, the_log, engine="spark", epoch=epoch, partitions=2, path=path, require_kinds=False
    )
    assert_same_result(got, want)
    if path == "passes":
        assert_ran_as_planned(program, got)


ARRANGED_EXAMPLES = int(os.environ.get("RESTREAM_ARRANGED_PROPERTY_EXAMPLES", "20"))


@settings(max_examples=ARRANGED_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=spark_cases())
def test_passes_the_driver_arranges_equal_the_serial_engine(case, spark_session):
    """With every log large enough for the driver to arrange it (``passes._local_arrangement``):
    the programs it takes (the others are not examples) give the serial engine's result."""
    from unittest import mock

    from hypothesis import assume

    from restream_kit.engines.spark.passes import _local_arrangement as _local_arrangement

    source, log, _epoch, _path = case
    program = rk.Program.from_source(source, name="prop")
    the_log = rk.Log(log)
    with mock.patch.object(_local_arrangement, "LOCAL_ROWS", 0):
        got = rk.replay(program, the_log, engine="spark", path="passes", require_kinds=False)
    assume(any("arranged by the driver" in what for what in got.metrics.path.values()))
    assert_same_result(got, rk.replay(program, the_log, require_kinds=False))
    assert_ran_as_planned(program, got)


#: A timed state write (``s.add(k, v, at=...)``, ``s.set(..., at=...)``) in a generated program.
TIMED_WRITE = re.compile(r"\.(add|set)\([^\n]*\bat=")
CHECKPOINT_EXAMPLES = int(os.environ.get("RESTREAM_CHECKPOINT_PROPERTY_EXAMPLES", "12"))
COMMIT_EXAMPLES = int(os.environ.get("RESTREAM_COMMIT_PROPERTY_EXAMPLES", "30"))


@settings(max_examples=COMMIT_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=spark_cases(), cut=st.integers(min_value=1, max_value=4), arranged=st.booleans())
def test_a_checkpoint_run_once_over_the_log_commits_the_serial_engines_epochs(
    case, cut, arranged, spark_session, tmp_path_factory
):
    """The pass path runs a checkpoint's passes once over the whole log, each task reporting
    its state at every epoch's end: every committed epoch (state, timed writes and scheduled
    events waiting, rows) is the serial engine's, and the passes ran as planned, in parallel,
    arranged by the driver when it can (``arranged``: every log counts as large)."""
    import json
    from unittest import mock

    from restream_kit.engines.spark.passes import _local_arrangement as _local_arrangement

    source, log, _epoch, _path = case
    program = rk.Program.from_source(source, name="prop")
    the_log = rk.Log(log)
    root = tmp_path_factory.mktemp("ck")
    want = rk.replay(program, the_log, epoch=cut, checkpoint=root / "serial", require_kinds=False)
    with mock.patch.object(_local_arrangement, "LOCAL_ROWS", 0 if arranged else 10**9):
        got = rk.replay(
            program, the_log, engine="spark", path="passes", partitions=2, epoch=cut,
            checkpoint=root / "spark",
         require_kinds=False)  # fmt: skip
    assert_same_result(got, want)
    assert_ran_as_planned(program, got)
    assert all("committed to the checkpoint" in what for what in got.metrics.path.values())
    epochs = json.loads((root / "serial" / "manifest.json").read_text())["epochs"]
    assert len(json.loads((root / "spark" / "manifest.json").read_text())["epochs"]) == len(epochs)
    assert_same_commits(root / "serial", root / "spark", range(len(epochs)))


@settings(max_examples=CHECKPOINT_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=spark_cases(), cut=st.integers(min_value=1, max_value=4), arranged=st.booleans())
def test_spark_resumes_and_starts_from_a_checkpoint_as_the_serial_engine_does(
    case, cut, arranged, spark_session, tmp_path_factory
):
    """A Spark replay resumed after its first committed epoch, or started from it, runs the
    rest of the log once, its passes fed that epoch's state (values, timed writes and
    scheduled events waiting), as rows or, to a pass that runs the serial engine's loop
    (``arranged``: every log counts as large, for the driver to arrange), each task its
    partition's share: its result and every epoch it commits are the serial engine's."""
    import json
    from unittest import mock

    from restream_kit.engines.spark.passes import _local_arrangement as _local_arrangement

    source, log, _epoch, _path = case
    # A known gap with a strict xfail of its own (tests/engines/test_resume_timed_adds.py): an
    # arranged pass resumed at an epoch applies a timed write pending there twice.
    assume(not (arranged and TIMED_WRITE.search(source)))
    program = rk.Program.from_source(source, name="prop")
    the_log = rk.Log(log)
    root = tmp_path_factory.mktemp("ck")
    want = rk.replay(program, the_log, epoch=cut, checkpoint=root / "serial", require_kinds=False)
    ck = root / "spark"
    options = dict(engine="spark", partitions=2, epoch=cut, checkpoint=ck)
    large = mock.patch.object(_local_arrangement, "LOCAL_ROWS", 0 if arranged else 10**9)
    with large:
        got = rk.replay(program, the_log, **options, require_kinds=False)
    assert_same_result(got, want)
    manifest = json.loads((ck / "manifest.json").read_text())
    assert manifest["state_format"] == "serial"
    epochs = len(manifest["epochs"])
    if epochs < 2:
        return
    keep_first_epochs(ck, 1)  # as if killed after the first epoch committed
    with large:
        resumed = rk.replay(program, the_log, **options, resume=True, require_kinds=False)
    assert resumed.resumed_from_epoch == 1
    assert_same_result(resumed, want)
    assert_ran_as_planned(program, resumed)
    assert_same_commits(root / "serial", ck, range(1, epochs))
    # Resumed again, complete: nothing is left to run, and the result is the same.
    with large:
        again = rk.replay(program, the_log, **options, resume=True, require_kinds=False)
    assert (again.resumed_from_epoch, again.metrics.epochs) == (epochs, 0)
    assert_same_result(again, want)
    # Started from the first epoch (of either engine's checkpoint): the serial engine's rest.
    start = rk.replay(
        program, the_log, epoch=cut, start_from=(root / "serial", 0), require_kinds=False
    )
    with large:
        again = rk.replay(
            program, the_log, engine="spark", partitions=2, start_from=(ck, 0), require_kinds=False
        )
    assert_same_result(again, start)
