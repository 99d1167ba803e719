"""The causal analysis: replay serially, record every read and write, find the longest chain.

This is how ReStream checked how much parallelism a log really offers. A handler run depends
on an earlier run when it reads a value that the earlier run wrote (read-after-write), and on
the run that scheduled its event. The depth of a run is one more than the deepest run it
depends on; the longest chain is the deepest run of the replay, counted in handler runs. No
engine that respects the serial semantics can finish in fewer steps than that, and the
planner's ``DataPath.chain_bound`` must never be below it.

What counts as a dependency:

- an overwrite or delete gives its key the depth of the writing run (so far);
- a merge (``+=``, ``-=``, ``add``, ``merge``) does not read: it raises the key's depth to the
  writing run's when that is deeper, so a counter read depends on the deepest of its merges,
  not on a chain through all of them;
- a future write takes effect at its time with the depth its run had when it was made;
- reading a key takes the depth of its value; reading a whole state (``for k in m``) the
  deepest of any of its keys.

The replay runs on the runtime of the serial semantics (:mod:`restream_kit.runtime`, the
serial engine's) over the program compiled by :mod:`restream_kit.compiler.compile` with
dictionaries that record their use; a subclass of the runtime stamps every write with the
depth of the run that made it. To tell a merge from a read followed by a write, ``m[k] += d`` is first rewritten as
``m.merge(k, lambda old: old + d)``, which the compiler already knows.
"""

from __future__ import annotations

import ast
import heapq
import itertools
from dataclasses import dataclass
from typing import Any

from ..compiler.scopes import ScopedTransformer
from ..io.log import Log
from ..model.program import Program
from ..model.state import Value
from ..runtime import ScheduledEvent, SerialRuntime
from ..runtime.loop import compile_loop

__all__ = ["CausalChain", "longest_chain"]


@dataclass(frozen=True)
class CausalChain:
    """The result of the causal analysis of a replay."""

    events: int
    runs: int
    longest: int
    end_handler: str | None
    end_lsn: int | None
    scheduled_runs: int


class _Tracker:
    """Depth of every value written so far (with the run that gave it that depth), and of the
    run in progress. A run reading back its own write depends on nobody new."""

    def __init__(self) -> None:
        self.cur = 0
        self.run = 0
        self.depth: dict[tuple[str, Any], tuple[int, int]] = {}
        self.whole: dict[str, tuple[int, int]] = {}

    def _see(self, slot: tuple[int, int] | None) -> None:
        if slot is not None:
            depth, run = slot
            if run == self.run:
                depth -= 1
            if depth > self.cur:
                self.cur = depth

    def read(self, state: str, key: Any) -> None:
        self._see(self.depth.get((state, key)))

    def read_whole(self, state: str) -> None:
        self._see(self.whole.get(state))

    def stamp(self) -> tuple[int, int]:
        """The depth a value written now gets, and the run writing it."""
        return self.cur + 1, self.run

    def wrote(self, state: str, key: Any, op: str, stamp: tuple[int, int]) -> None:
        slot = (state, key)
        old = self.depth.get(slot)
        if op not in ("add", "merge") or old is None or stamp[0] > old[0]:
            self.depth[slot] = stamp
        whole = self.whole.get(state)
        if whole is None or stamp[0] > whole[0]:
            self.whole[state] = stamp


class _RecordingDict(dict):
    """A state's storage that tells the tracker about every use by compiled handlers."""

    __slots__ = ("state", "tracker")

    def __init__(self, state: str, tracker: _Tracker):
        super().__init__()
        self.state = state
        self.tracker = tracker

    def get(self, key: Any, default: Any = None) -> Any:
        self.tracker.read(self.state, key)
        return dict.get(self, key, default)

    def __getitem__(self, key: Any) -> Any:
        self.tracker.read(self.state, key)
        return dict.__getitem__(self, key)

    def __contains__(self, key: Any) -> bool:
        self.tracker.read(self.state, key)
        return dict.__contains__(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.tracker.wrote(self.state, key, "set", self.tracker.stamp())
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        self.tracker.wrote(self.state, key, "delete", self.tracker.stamp())
        dict.__delitem__(self, key)

    def pop(self, key: Any, *default: Any) -> Any:
        self.tracker.wrote(self.state, key, "delete", self.tracker.stamp())
        return dict.pop(self, key, *default)


def _reading_whole(name: str):
    """``dict``'s method ``name``, first telling the tracker the whole state is read."""
    method = getattr(dict, name)

    def whole(self: _RecordingDict, *args: Any) -> Any:
        self.tracker.read_whole(self.state)
        return method(self, *args)

    whole.__name__ = name
    return whole


for _name in ("__iter__", "__len__", "keys", "values", "items"):
    setattr(_RecordingDict, _name, _reading_whole(_name))


class _StampedEvent(ScheduledEvent):
    """A scheduled event that knows the depth of the run that scheduled it (in a slot, so
    that it is not one of the event's fields)."""

    __slots__ = ("stamp",)


class _CausalRuntime(SerialRuntime):
    """The serial runtime, with every write stamped with the depth of the run that made it
    (a timed write keeps the stamp of when it was made) and told to the tracker."""

    def __init__(self, tracker: _Tracker, names: dict[int, str]):
        super().__init__()
        self.tracker = tracker
        self.names = names
        self.event_type = self._stamped

    def _stamped(self, kind: str, ts: int, lsn: int, seq: int, fields: dict) -> ScheduledEvent:
        event = _StampedEvent(kind, ts, lsn, seq, fields)
        event.stamp = self.tracker.stamp()
        return event

    def emit(self, table: str, **fields: Any) -> None:
        pass  # the analysis needs no rows

    def write(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None:
        if at is None or at == self.event[1]:
            if op == "merge":
                # The merge function may itself read state: run it before stamping the write.
                value = arg(dict.get(d, key, default))
                self.tracker.wrote(self.names[id(d)], key, "merge", self.tracker.stamp())
                dict.__setitem__(d, key, value)
            else:
                self._apply(d, default, op, key, arg, self.tracker.stamp())
            return
        super().write(d, default, op, key, (arg, self.tracker.stamp()), at)

    def apply_due(self, t: int) -> None:
        future = self.future
        while future and future[0][0] <= t:
            _at, _n, d, default, op, key, (arg, stamp) = heapq.heappop(future)
            self._apply(d, default, op, key, arg, stamp)

    def _apply(self, d: dict, default: Any, op: str, key: Any, arg: Any, stamp: Any) -> None:
        """One write, told to the tracker as ``op`` (the dict's own methods would count the
        ``add`` of a counter as a read)."""
        self.tracker.wrote(self.names[id(d)], key, op, stamp)
        if op == "set":
            dict.__setitem__(d, key, arg)
        elif op == "add":
            dict.__setitem__(d, key, dict.get(d, key, default) + arg)
        elif op == "merge":
            dict.__setitem__(d, key, arg(dict.get(d, key, default)))
        else:
            dict.pop(d, key, None)


class _MergeRewriter(ScopedTransformer):
    """``m[k] op= d`` on state becomes ``m.merge(k, lambda old: old op d)``."""

    def __init__(self, program: Program):
        super().__init__(program.states)
        self.states = program.states

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        target = node.target
        base = getattr(target, "value", None)
        state = self.state_named(base.id) if isinstance(base, ast.Name) else None
        if state is None:
            return node
        is_value = isinstance(self.states[state], Value)
        old = ast.Name(id="_rs_old", ctx=ast.Load())
        fn = ast.Lambda(
            args=ast.arguments(
                posonlyargs=[],
                args=[ast.arg(arg="_rs_old")],
                kwonlyargs=[],
                kw_defaults=[],
                defaults=[],
            ),
            body=ast.BinOp(left=old, op=node.op, right=node.value),
        )
        if isinstance(target, ast.Subscript) and not is_value:
            args = [target.slice, fn]
        elif isinstance(target, ast.Attribute) and target.attr == "value" and is_value:
            args = [fn]
        else:
            return node
        merge = ast.Attribute(
            value=ast.Name(id=base.id, ctx=ast.Load()), attr="merge", ctx=ast.Load()
        )
        call = ast.Expr(value=ast.Call(func=merge, args=args, keywords=[]))
        return ast.copy_location(call, node)


def merges_made_explicit(program: Program) -> Program:
    """The program with every augmented assignment to state written as a ``merge`` call."""
    tree = ast.parse(program.source, filename=program.filename)
    tree = ast.fix_missing_locations(_MergeRewriter(program).visit(tree))
    return Program.from_source(ast.unparse(tree), name=program.name)


def longest_chain(
    program: Program | str, log: Log | Any, *, max_events: int | None = None
) -> CausalChain:
    """Replay ``log`` (its first ``max_events`` events) and measure its longest causal chain."""
    program = Program.load(program)
    log = log if isinstance(log, Log) else Log(log)
    explicit = merges_made_explicit(program)
    tracker = _Tracker()
    stores = {name: _RecordingDict(name, tracker) for name in explicit.states}
    names = {id(d): name for name, d in stores.items()}
    rt = _CausalRuntime(tracker, names)
    loop = compile_loop(explicit, rt, stores)
    # The chain's fields of :class:`CausalChain`, kept up to date by every run.
    best: dict[str, Any] = {"runs": 0, "longest": 0, "end_handler": None, "end_lsn": None}

    def hook(name: str, fn: Any, ev: Any, scheduled: bool) -> None:
        tracker.run += 1
        tracker.cur = ev.stamp[0] if scheduled else 0
        fn(ev)
        depth = tracker.cur + 1
        best["runs"] += 1
        if depth > best["longest"]:
            best.update(longest=depth, end_handler=name, end_lsn=ev.lsn)

    events = 0

    def counted():
        nonlocal events
        for ev in itertools.chain.from_iterable(log.iter_events(stop=max_events)):
            events += 1
            yield ev

    scheduled = loop.run_events(counted(), hook)
    return CausalChain(events=events, scheduled_runs=scheduled, **best)
