"""A resume's or a ``start_from``'s state, dealt to the partitions the driver arranges.

When the driver arranges the passes' events (``_local_arrangement``), a replay that starts
from a committed epoch keeps that arrangement and the serial engine's loop: each task gets,
beside its partition's events after the start, its partition's share of the start state, in
a file of the replay's own scratch directory (:func:`deal`):

- **a state's values** go to the partition of their key in every pass that holds the state:
  a pass is partitioned by its states' key, and the driver knows where each key's events
  are (every log event's partition, ``partition_of``). Keys with no event in the log go to
  the first partition: no run reads them, and timed writes to them apply there as they fall
  due;
- **a timed write still waiting** goes with its key, numbered as the serial engine numbered
  it (``_plain_pass`` orders it before whatever a run makes for the same time).

A state held by a pass with no log event, scheduled events waiting (a ``start_from`` of a
program that schedules), or a state read through copies cannot be dealt so (:func:`dealable`
says): such a replay takes the start state as rows through Spark's sort
(``_pass_epochs._carry_frame``) in the general task.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from typing import Any

from . import _pass_rows as W
from ._local_arrangement import partition_of

__all__ = ["Starts", "dealable", "deal"]


@dataclass(frozen=True)
class Starts:
    """Where a replay's tasks start: after the log event ``after`` (its lsn), each with its
    partition's share of the start state (pass -> a file per partition, ``""`` for none)."""

    after: int
    shares: dict[int, tuple[str, ...]] = field(default_factory=dict)


def dealable(pp: Any, log_kinds: dict, state: dict | None) -> bool:
    """Whether the start state ``state`` (``_pass_epochs._Begun.state``) can be dealt to the
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
    replay's scratch directory (``setup.values_dir``, made here if the replay has none)."""
    if setup.values_dir is None:
        from ._pass_setup import replay_dir

        setup.values_dir = replay_dir()
    waiting: dict[str, list] = {}
    for number, (at, _n, name, op, key, arg) in enumerate(state["future"]):
        waiting.setdefault(name, []).append((at, number, op, key, arg))
    shares: dict[int, tuple[str, ...]] = {}
    for p in setup.pp.passes:
        if p.index not in setup.local:
            continue
        names = [name for name in p.homes if state["stores"].get(name) or waiting.get(name)]
        if not names:
            continue
        where = _key_partitions(setup, p, n)
        parts: list[dict] = [{"stores": {}, "future": []} for _ in range(n)]
        for name in names:
            for key, value in state["stores"].get(name, {}).items():
                parts[where.get(key, 0)]["stores"].setdefault(name, {})[key] = value
            for at, number, op, key, arg in waiting.get(name, ()):
                parts[where.get(key, 0)]["future"].append((at, number, name, op, key, arg))
        paths = []
        for i, part in enumerate(parts):
            if not part["stores"] and not part["future"]:
                paths.append("")
                continue
            path = os.path.join(setup.values_dir, f"start-{p.index}-{i}.bin")
            with open(path, "wb") as f:
                f.write(W.dumps(part))
            paths.append(path)
        shares[p.index] = tuple(paths)
    return Starts(after, shares)


def _key_partitions(setup: Any, p: Any, n: int) -> dict:
    """Pass ``p``'s keys in the log, each with its partition (the driver's dealing): a key
    as the handlers see it, a value or a tuple as the partition expression makes it."""
    import polars as pl

    by = list(setup.local[p.index])
    kinds = setup.log_kinds[p.index]
    parts = partition_of(setup.events, setup.log.fingerprint, tuple(by), kinds, n)
    frame = (
        pl.from_arrow(setup.events.table.select(by))
        .with_columns(pl.Series("_rs_part", parts))
        .filter(pl.col("_rs_part") >= 0)
        .unique(subset=by)
    )
    columns = [frame.get_column(c).to_list() for c in by]
    tupled = isinstance(ast.parse(p.partition, mode="eval").body, ast.Tuple)
    keys = list(zip(*columns)) if tupled else columns[0]
    return dict(zip(keys, frame.get_column("_rs_part").to_list()))
