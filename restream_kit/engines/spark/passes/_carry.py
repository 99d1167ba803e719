"""The state a resumed or ``start_from`` replay starts from, as rows for its passes (where
the driver does not deal it to the partitions it arranges, ``passes._start_shares``).

A state's values go to every pass that holds it (tag ``TAG_STATE``, before everything), a
timed write to the holders of its state and a scheduled event to the passes of its kind, at
positions that sort before whatever a run makes at the same time (``_rows.restored_sub``)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ...serial import RESERVED_FIELDS
from .._codec import encode_key
from .._program_ref import key_function
from . import _rows as W
from ._plan import BY_KEY, ORDER, SINGLE
from ._setup import Setup

__all__ = ["carry_frame"]

_FIRST = -(1 << 63)  # the position of a state row: before every event
# The carried rows' columns: those of a pass's output (typed as there), and the entry's tag.
_CARRY_SCHEMA = pa.schema(
    [
        ("_rs_tag", pa.int8()) if name == "_rs_tag" else W.out_schema(0).field(name)
        for name in (
            "_rs_dest",
            "_rs_t",
            "_rs_ph",
            "_rs_o",
            "_rs_sub",
            "_rs_tag",
            "_rs_pk",
            "_rs_b",
        )
    ]
)


def _pass_op(op: str, arg: Any) -> tuple:
    return ("del",) if op == "del" else (op, arg)


def carry_frame(setup: Setup, state: dict[str, Any], skip: frozenset = frozenset()) -> Any:
    """The rows an epoch starts from (see the module docstring), as a DataFrame; none for
    the passes ``skip`` (they take their shares as rows of their own: ``passes._start_shares``)."""
    pp, program = setup.pp, setup.program
    # (A pass holding copies of a state gets them from its versions, made by a holder.)
    holders = {
        name: [p for p in pp.passes if name in p.homes and p.index not in skip]
        for name in program.states
    }
    rows: list[tuple] = []

    def pk(partition: str, key: Any) -> str:
        return "N" if partition in (SINGLE, ORDER) else encode_key(key)

    # Each value numbered in the state's order: a fold records it as a version there, and a
    # copy, which merges several folds' versions by position, holds the keys in that order.
    number = 0
    for name, values in state["stores"].items():
        for p in holders.get(name, ()):
            for i, (key, value) in enumerate(values.items(), number):
                blob = W.dumps((name, key, value))
                sub = i.to_bytes(8, "big")
                where = pk(p.partition, p.partition_value(name, key))
                rows.append((p.index, _FIRST, 0, 0, sub, W.TAG_STATE, where, blob))
        number += len(values)
    for at, n, name, op, key, arg in state["future"]:
        sub = W.restored_sub(n)
        blob = W.dumps((name, key, _pass_op(op, arg)))
        for p in holders.get(name, ()):
            where = pk(p.partition, p.partition_value(name, key))
            rows.append((p.index, at, 0, 0, sub, W.TAG_WRITE, where, blob))
    routes: dict[int, Any] = {}
    per_root = state["scheduled_per_root"]
    for at, n, ev in state["scheduled"]:
        sub = W.restored_sub(n)
        fields = {k: v for k, v in vars(ev).items() if k not in RESERVED_FIELDS}
        blob = W.dumps((ev.kind, fields, ev.lsn, ev.seq, per_root.get(ev.lsn, ev.seq)))
        for target in pp.kind_passes.get(ev.kind, ()):
            partition = pp.passes[target].partition
            if partition in (SINGLE, BY_KEY):
                where = "N"
            elif partition == ORDER:
                where = W.order_value(ev.lsn)
            else:
                fn = routes.get(target)
                if fn is None:
                    fn = routes[target] = key_function(partition, program)
                where = encode_key(fn(ev))
            rows.append((target, at, 1, 0, sub, W.TAG_SCHED, where, blob))
    columns = list(zip(*rows)) if rows else [[] for _ in _CARRY_SCHEMA]
    table = pa.table(
        [pa.array(list(c), f.type) for c, f in zip(columns, _CARRY_SCHEMA)], schema=_CARRY_SCHEMA
    )
    return setup.session.createDataFrame(table)
