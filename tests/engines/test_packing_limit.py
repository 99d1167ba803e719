"""A pass's arrangement kept packed in the JVM's cache only for a log of at most
``PACK_MAX_EVENTS`` events (``passes._packing``): a larger one is arranged again in each
replay, with the same result as the serial engine's."""

from __future__ import annotations

import pytest
from engine_matrix import assert_same_result

import restream_kit as rk
from restream_kit.engines.spark.passes import _packing

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

#: One sequential stage (its state read by two keys): a pass in one partition, the case
#: whose whole log was one cached block.
SEQUENTIAL = """
from restream_kit import emit, on, state

last_seen = state.Map(default=None)
per_ip = state.Counter()

@on("message")
def track(e):
    per_ip[e.ip] += 1
    prev = last_seen.get(e.src)
    if prev is not None and e.ts - prev < 1000 and per_ip[e.ip] > 3:
        emit("burst", sender=e.src, ip=e.ip)
    last_seen[e.src] = e.ts
"""


@pytest.mark.parametrize("limit", [0, 10**9])
def test_a_log_above_the_limit_is_not_kept_packed(spark_session, monkeypatch, limit):
    from sample_data import social

    log = rk.Log(social.generate(3_000, seed=11, users=40))
    program = rk.Program.from_source(SEQUENTIAL, name="sequential")
    monkeypatch.setattr(_packing, "PACK_MAX_EVENTS", limit)
    monkeypatch.setattr(_packing, "_ARRANGED", {})
    want = rk.replay(program, log)
    got = rk.replay(program, log, engine="spark", master="local[2]")
    assert_same_result(got, want)
    assert bool(_packing._ARRANGED) is (len(log) <= limit)
    for _plan, packed in _packing._ARRANGED.values():
        _packing._unpersist(packed)
