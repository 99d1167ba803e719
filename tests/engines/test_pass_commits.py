"""The timed writes a checkpointed pass replay commits at an epoch's end.

The tasks report the timed writes waiting at each end (``(tag, position, entry)``, a write
held by several passes once from each); the driver numbers them in position order, each
once, as the serial engine's state holds them (``passes._epochs._state_after``). Many of them
are made as columns for the commit (``FutureColumns``), the rest as the serial engine's
tuples: read back from the checkpoint, both must be the same writes, with the same types.
"""

from __future__ import annotations

import pickle

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import restream_kit as rk
from restream_kit.engines.spark.passes import _rows as W
from restream_kit.engines.spark.passes._epochs import _state_after
from restream_kit.io import checkpoint
from restream_kit.io._arrow_stores import MIN_KEYS, FutureColumns

PROGRAM = rk.Program.from_source(
    "from restream_kit import on, state\n\ns = state.Map(default=0)\n\n\n"
    "@on('x')\ndef h(e):\n    s[e.k] = 1\n",
    name="commits",
)

KEYS = st.one_of(st.integers(-5, 5), st.text("ab", max_size=2), st.tuples(st.integers(0, 3)))
OPS = st.one_of(
    st.tuples(st.just("add"), st.integers(-3, 3)),
    st.tuples(st.just("set"), st.one_of(st.integers(), st.floats(allow_nan=False))),
    st.just(("del",)),
)


def _reference(carried: list) -> list:
    """The writes as the serial engine numbers them: by position, each once."""
    seen, out = set(), []
    for _tag, pos, (name, key, op) in sorted(carried, key=lambda c: (c[1], c[0])):
        if pos in seen:
            continue
        seen.add(pos)
        out.append((pos[0], len(out), name, op[0], key, op[1] if len(op) > 1 else None))
    return out


def _typed(writes: list) -> list:
    return [tuple((type(v).__name__, v) for v in w) for w in writes]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    entries=st.lists(st.tuples(st.integers(0, 50), KEYS, OPS), min_size=1, max_size=40),
    many=st.booleans(),
    pickled=st.booleans(),
    key_shape=st.sampled_from(["as drawn", "one type"]),
)
def test_the_writes_waiting_at_an_end_read_back_as_the_serial_engine_numbers_them(
    entries, many, pickled, key_shape, tmp_path_factory
):
    # Enough of them for columns (``many``), each reported twice (two passes hold it).
    drawn = entries * (-(-MIN_KEYS // len(entries)) if many else 1)
    carried = []
    for i, (at, key, op) in enumerate(drawn):
        if key_shape == "one type":
            key = f"k{key}"
        sub = W.U32.pack(i)
        entry = ("s", key, op)
        for _copy in range(2):
            blob = pickle.dumps(entry) if pickled else entry
            carried.append((W.TAG_WRITE, (at, W.PH_TIMED, 0, sub), blob))
    want = _reference([(t, p, pickle.loads(b) if pickled else b) for t, p, b in carried])
    state = _state_after(PROGRAM, {"s": {}}, carried, [])
    assert state["order"] == len(want)
    columns = type(state["future"]) is FutureColumns
    # Columns whenever there are many of one plain shape: one key type, ints for add.
    if many and key_shape == "one type" and all(op[0] == "add" for _a, _k, op in drawn):
        assert columns
    if not many:
        assert not columns
    directory = tmp_path_factory.mktemp("commit")
    checkpoint.save_value(directory, "state", state, "the state")
    back = checkpoint.load_value(directory, "state")["future"]
    assert _typed([tuple(w) for w in back]) == _typed(want)
