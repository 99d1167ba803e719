"""Where a pass's input comes from (``passes._sources``): one typed source per place.

Each source is a frozen dataclass with one method, ``frame``, that gives the pass's job its
rows; it travels to the tasks pickled in ``PassSpec.source``, and a task reads its rows with
``task_input``. The replays through each source are the engine tests' (``test_passes``,
``test_local_arrangement``, ``test_lookups``, ``test_start_shares``...); here, without
Spark: the shape of the sources, and what a task makes of its rows for each.
"""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pyarrow as pa
import pytest

from restream_kit.engines.spark.passes import _sources as S
from restream_kit.engines.spark.passes._local_arrangement import LocalInput
from restream_kit.engines.spark.passes._packing import PackTask
from restream_kit.engines.spark.passes._rows import dumps
from restream_kit.engines.spark.passes._start_shares import SHARE

SOURCES = [S.LogEvents, S.Forwarded, S.Zipped, S.Arranged, S.NarrowSent, S.LookedUp, S.Sent]


def test_every_source_is_a_frozen_dataclass_with_one_method():
    assert set(SOURCES) == set(S.Source.__subclasses__())
    for source in SOURCES:
        assert dataclasses.is_dataclass(source) and source.__dataclass_params__.frozen
        own = [
            name
            for name, value in vars(source).items()
            if inspect.isfunction(value) and not name.startswith("__")
        ]
        assert own == ["frame"], source


@pytest.mark.parametrize(
    "source",
    [
        S.LogEvents("click", share=True),
        S.Forwarded(),
        S.Zipped(),
        S.Arranged(LocalInput("/tmp/x", (("a.arrow",),), after=3), zipped=True),
        S.NarrowSent((("n.arrow",),)),
        S.LookedUp((("v.arrow",),)),
        S.Sent(),
    ],
)
def test_a_source_travels_to_the_tasks(source):
    back = pickle.loads(dumps(source))
    assert back == source
    assert back.receives is isinstance(source, S.Sent)
    assert back.partial is isinstance(source, (S.LogEvents, S.Arranged))


def _events(lsn: list[int]) -> pa.RecordBatch:
    return pa.record_batch({"lsn": pa.array(lsn, pa.int64()), "ts": pa.array(lsn, pa.int64())})


def test_a_task_reads_its_rows_as_its_source_sends_them():
    batches = [_events([1, 2]), _events([3])]
    # Rows with positions, and log events not packed: as they come.
    for source in (S.Sent(), S.LogEvents()):
        got, start = S.task_input(source, iter(batches))
        assert [b.column("lsn").to_pylist() for b in got] == [[1, 2], [3]]
        assert start is None
    # Log events packed and kept for the next replay: unpacked, in order.
    packed = list(PackTask(())(iter(batches)))
    got, start = S.task_input(S.Forwarded(), iter(packed))
    assert [v for b in got for v in b.column("lsn").to_pylist()] == [1, 2, 3]
    # A share of the start state as rows before the events: taken off the front.
    entry = ("value", "count", "k", 7)
    share = pa.record_batch(
        {
            "lsn": pa.array([0, 1, 2], pa.int64()),
            "ts": pa.array([0, 1, 2], pa.int64()),
            SHARE: pa.array([dumps(entry), None, None], pa.binary()),
        }
    )
    got, start = S.task_input(S.LogEvents(share=True), iter([share]))
    assert start == {"stores": {"count": {"k": 7}}, "future": []}
    assert [v for b in got for v in b.column("lsn").to_pylist()] == [1, 2]
