"""A resume's or a ``start_from``'s state, dealt to the partitions the driver arranges.

When the driver arranges the passes' events (``passes._local_arrangement``), a replay that starts
from a committed epoch keeps that arrangement and the serial engine's loop: each task gets,
beside its partition's events after the start, its partition's share of the start state, in
a file of the replay's own scratch directory (:func:`deal`):

- **a state's values** go to the partition of their key in every pass that holds the state:
  a pass is partitioned by its states' key, and the driver knows where each key's events
  are (the deal of its keys, ``_local_arrangement.key_partitions``). Keys with no event in the log go to
  the first partition: no run reads them, and timed writes to them apply there as they fall
  due;
- **a timed write still waiting** goes with its key, numbered as the serial engine numbered
  it (``passes._plain`` orders it before whatever a run makes for the same time).

A state held by a pass with no log event, scheduled events waiting (a ``start_from`` of a
program that schedules), or a state read through copies cannot be dealt so (:func:`dealable`
says): such a replay takes the start state as rows through Spark's sort
(``passes._carry.carry_frame``).

Where Spark shuffles the events, a pass that runs the serial engine's loop keeps it too
when nothing but the start feeds it (:func:`shares_rows`): its share goes as rows keyed as
its events are (its partition columns, or its partition value), which Spark's repartition
sends where the key's events go and its sort puts before them (:func:`share_frame`); the
task takes them off the front of its partition (``passes._plain``). Other passes take the
start as rows in the general task.
"""

from __future__ import annotations

import ast
import itertools
import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .._codec import encode_key
from . import _rows as W
from ._local_arrangement import key_partitions
from ._machine import replay_dir
from ._plan import BY_KEY, ORDER, SINGLE
from ._sql import unquoted

__all__ = [
    "Starts",
    "dealable",
    "deal",
    "start_of",
    "shares_rows",
    "share_frame",
    "taken_start",
    "SHARE",
]

#: The column of a share row's entry (null on events): see :func:`share_frame`.
SHARE = "_rs_share"
_FIRST = -(1 << 63)  # a share row's time: before every event


@dataclass(frozen=True)
class Starts:
    """Where a replay's tasks start: after the log event ``after`` (its lsn), each with its
    partition's share of the start state: pass -> a file per partition (``""`` for none)
    where the driver arranges the events, or else pass -> its rows (:func:`share_frame`;
    None for none)."""

    after: int
    shares: dict[int, tuple[str, ...]] = field(default_factory=dict)
    frames: dict[int, Any] = field(default_factory=dict)


def dealable(pp: Any, log_kinds: dict, state: dict | None) -> bool:
    """Whether the start state ``state`` (``passes._epochs._Begun.state``) can be dealt to the
    partitions of passes that take log events (see the module docstring)."""
    if state is None:
        return True
    if state["scheduled"] or any(p.copies or p.versions_to for p in pp.passes):
        return False
    held = {name for name, values in state["stores"].items() if values}
    held.update(name for _at, _n, name, _op, _key, _arg in state["future"])
    return all(log_kinds[p.index] for p in pp.passes if held.intersection(p.homes))


def deal(setup: Any, state: dict, after: int, n: int) -> Starts:
    """Each partition's share of ``state`` in every pass the driver arranged, written to the
    replay's scratch directory (``setup.values_dir``, made here if the replay has none) as
    its entries (:func:`start_of` makes them a start again in the task)."""
    if setup.values_dir is None:
        setup.values_dir = replay_dir()
    shares: dict[int, tuple[str, ...]] = {}
    for p in setup.pp.passes:
        entries = list(_entries(p, state)) if p.index in setup.local else []
        if not entries:
            continue
        where = key_partitions(setup, p, n, list(dict.fromkeys(key for key, _e in entries)))
        parts: list[list] = [[] for _ in range(n)]
        for key, entry in entries:
            parts[where.get(key, 0)].append(entry)
        paths = []
        for i, part in enumerate(parts):
            path = os.path.join(setup.values_dir, f"start-{p.index}-{i}.bin") if part else ""
            if part:
                with open(path, "wb") as f:
                    f.write(W.dumps(part))
            paths.append(path)
        shares[p.index] = tuple(paths)
    return Starts(after, shares)


def _entries(p: Any, state: dict) -> Iterator[tuple[Any, tuple]]:
    """Pass ``p``'s entries of the start state, each with its key's partition value: a value of a state it
    holds, ``("value", name, key, value)``, then a timed write still waiting on one,
    ``("write", at, number, name, op, key, arg)``, numbered by the serial engine."""
    for name in p.homes:
        for key, value in state["stores"].get(name, {}).items():
            yield p.partition_value(name, key), ("value", name, key, value)
    for at, number, name, op, key, arg in state["future"]:  # (a heap: numbered, not sorted)
        if name in p.homes:
            yield p.partition_value(name, key), ("write", at, number, name, op, key, arg)


def start_of(entries: list) -> dict:
    """A task's start (``{"stores": .., "future": ..}``, as ``passes._plain`` restores it)
    from its share's entries (:func:`_entries`); the timed writes in the serial order."""
    start: dict = {"stores": {}, "future": []}
    for entry in entries:
        if entry[0] == "value":
            _what, name, key, value = entry
            start["stores"].setdefault(name, {})[key] = value
        else:
            start["future"].append(entry[1:])
    start["future"].sort(key=lambda w: w[1])  # (at, number, ...)
    return start


def _tupled(partition: str) -> bool:
    """Whether a pass's keys are tuples (its partition expression is one), not values."""
    return isinstance(ast.parse(partition, mode="eval").body, ast.Tuple)


def shares_rows(pp: Any, p: Any, state: dict) -> bool:
    """Whether pass ``p``, fed by nothing but the start, takes its share as rows before its
    events (:func:`share_frame`) and keeps the serial engine's loop: it is partitioned by a
    key, and no scheduled event of the start is of a kind it handles (its loop runs log
    events only)."""
    if p.partition in (ORDER, SINGLE, BY_KEY) or p.copies or p.versions_to:
        return False
    mine = {kind for kind, targets in pp.kind_passes.items() if p.index in targets}
    return not any(ev.kind in mine for _at, _n, ev in state["scheduled"])


def share_frame(setup: Any, p: Any, state: dict, raw: list[str] | None) -> Any:
    """Pass ``p``'s share of ``state`` as rows keyed as its events are: by the columns
    ``raw`` (a key's value in each), or else by its partition value ``_rs_pk``; each with
    its entry (:data:`SHARE`: a state's value, or a timed write with its serial number),
    first in time (``ts``) and in the serial order (``lsn``). None when it has none."""
    entries = list(_entries(p, state))
    if not entries:
        return None
    columns: dict[str, Any] = {}
    if raw is None:
        columns["_rs_pk"] = pa.array([encode_key(key) for key, _e in entries], pa.string())
    else:
        names = [unquoted(c) for c in raw]
        tupled = _tupled(p.partition)
        for i, name in enumerate(names):
            values = [key[i] if tupled else key for key, _e in entries]
            columns[name] = pa.array(values, setup.events.types[name])
    columns["ts"] = pa.array([_FIRST] * len(entries), pa.int64())
    columns["lsn"] = pa.array(range(len(entries)), pa.int64())
    columns[SHARE] = pa.array([W.dumps(e) for _key, e in entries], pa.binary())
    return setup.session.createDataFrame(pa.table(columns))


def taken_start(batches: Any) -> tuple[Any, dict]:
    """In a task of a pass given its share as rows (:func:`share_frame`): the share, taken
    off the front of its partition, as a start (``{"stores": .., "future": ..}``), and the
    events after it. A share row after an event fails the task: the sort was lost."""
    it = iter(batches)
    entries: list = []
    rest: Any = iter(())
    for batch in it:
        column = batch.column(SHARE)
        k = batch.num_rows - column.null_count
        if column.slice(k).null_count != batch.num_rows - k:
            raise RuntimeError("a share of the start state came after an event")
        entries += [pickle.loads(b) for b in column.slice(0, k).to_pylist()]
        if k < batch.num_rows:
            rest = itertools.chain([batch.slice(k)], it)
            break
    return rest, start_of(entries)
