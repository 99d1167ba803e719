"""Property tests: random programs and logs, the engines against the naive interpreter."""

from __future__ import annotations

import os

import pytest
from engine_matrix import rows_of
from hypothesis import HealthCheck, given, settings
from naive import events, programs, render, run_naive

import restream_kit as rk
from restream_kit.result import ROW_COLUMNS

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

EXAMPLES = int(os.environ.get("RESTREAM_PROPERTY_EXAMPLES", "200"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=programs(), log=events)
def test_serial_engine_equals_the_naive_interpreter(spec, log):
    program = rk.Program.from_source(render(spec), name="prop")
    result = rk.replay(program, rk.Log(log))
    want_rows, want_state = run_naive(spec, log)
    got = rows_of(result, "out")
    assert len(got) == len(want_rows)
    for row, (lsn, handler, fields) in zip(got, want_rows):
        assert (row["lsn"], row["handler"]) == (lsn, handler)
        assert {k: row[k] for k in fields} == fields
        assert all(row[k] is None for k in row if k not in fields and k not in ROW_COLUMNS)
    assert result.state == want_state
