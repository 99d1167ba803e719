"""Record a run's history on Spark: the same probes, with the same values, as the serial engine.

A history (:mod:`restream_kit.history.recorder`) holds, for every read site of one stage on
another stage's state, the value the read finds at the reading handler's place for every log
event of the handler's kinds, in log order. The serial engine records it with a statement
its loop runs before the handler. On Spark the values are found where the replay already
computes them, and the driver puts them in log order:

- **prefix path** (lowered programs, ``prefix._driver``): in one round (the last, or one more when a
  probed state is only complete there), each epoch's task evaluates every probe as a column
  over the epoch's events of the reader's kinds, with the same as-of lookups the epoch's own
  reads use, plus whether the store held the key (``absent``). The epochs' columns,
  concatenated in epoch order, are the probe in log order;
- **pass path**: the task that runs the reading handler evaluates the serial engine's hook
  statement at the handler's place (after the values probed upstream are put in its store)
  and keeps ``(ts, lsn, value)`` per log event; the driver sorts by ``(ts, lsn)``.

Either way the driver checks that every probe has one value per event of its reader's kinds.
A probe the replay's path cannot answer (a lowered program whose read does not match the
site's; a pass that neither holds the state nor is sent its values) makes the replay take the
pass path, or, failing that, the history is recorded by a serial replay in the driver, which
``Result.warnings`` and ``metrics.path`` say.
"""

from __future__ import annotations

import ast
import io
import pickle
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ... import planner
from ...compiler.lower import Arith, Col, Lit, Lowered, Neg
from ...history.probes import ABSENT, hook_source
from ...history.recorder import History, RecordedProbe, recorded_sites
from ..options import SparkOptions
from ._program_ref import key_function
from .passes._plan import SINGLE
from .passes._rows import AFTER_RUN, HIST, PH_LOG, dumps, for_driver
from .prefix._columnar import _align, _dtype, _keyed, combine_deltas

__all__ = [
    "SparkHistory",
    "PrefixProbes",
    "TaskHistory",
    "not_recorded_note",
    "encode_arrow",
    "HIST",
]


def not_recorded_note(options: SparkOptions) -> str | None:
    """Why a replay with ``options`` keeps no history (as the serial engine says), or None."""
    if options.on_error != "stop" or any(
        getattr(options, k) for k in ("checkpoint", "resume", "start_from")
    ):
        return (
            "the run's history was not recorded: it is kept for whole replays that stop on "
            "errors, without checkpoints"
        )
    return None


class SparkHistory:
    """The probes a Spark replay of ``program`` over ``log`` records, and the history they make."""

    def __init__(self, program: Any, log: Any):
        self.program = program
        self.log = log
        self.plan = planner.plan(program, allow_nondeterminism=True)
        self.sites = recorded_sites(program, self.plan, log.columns)
        self.index = {h.name: h for h in program.handlers}
        self.history = History.new(program, log, self.plan)
        #: What ran, for ``metrics.path["history"]``.
        self.how = ""

    # -- the prefix path ---------------------------------------------------------------------

    def prefix_probes(self, low: Lowered) -> tuple[PrefixProbes | None, str | None]:
        """The probes as lowered reads (shipped to the epochs' tasks), or None and why not."""
        specs = []
        for slot, (_sig, site) in enumerate(self.sites):
            h = self.index[site.handler].index
            key = _lowered_key(site.key, site.event_arg)
            if key is None or not any(
                r.handler == h and r.state == site.state and r.key == key for r in low.reads
            ):
                return None, (
                    f"the read of {site.state}[{site.text}] in {site.handler} (line "
                    f"{site.lineno}) is not one the lowered program evaluates"
                )
            specs.append((slot, h, site.state, key))
        levels = [low.states[s].level + 1 for _slot, _h, s, _k in specs]
        at = max([low.levels - 1, *levels])
        return PrefixProbes(tuple(specs), at), None

    def take_prefix(self, probes: PrefixProbes, parts: dict[int, list]) -> None:
        """The probes from the epochs' columns (``parts``: slot -> [(epoch, IPC bytes)])."""
        for slot, (sig, _site) in enumerate(self.sites):
            frames = [_from_ipc(b) for _c, b in sorted(parts.get(slot, []), key=lambda x: x[0])]
            frame = pl.concat(frames) if frames else pl.DataFrame({"v": [], "a": []})
            self._add(sig, frame.get_column("v").to_arrow(), frame.get_column("a").to_numpy())
        self.how = (
            f"recorded on Spark: {len(self.sites)} probe(s) evaluated as columns by the epochs' "
            f"tasks in round {probes.round + 1}"
        )

    # -- the pass path -----------------------------------------------------------------------

    def pass_sites(self, p: Any, columns: tuple[str, ...]) -> tuple[tuple, str | None]:
        """What pass ``p``'s tasks record: ``(slot, handler, state, key, hook source)`` per
        probe read by one of its handlers; or why the pass cannot (its store would not hold
        the value at the reader's place)."""
        out = []
        for slot, (_sig, site) in enumerate(self.sites):
            h = self.index[site.handler].index
            if h not in p.handlers:
                continue
            served = any(q.state == site.state and q.handler == h for q in p.consumes)
            if not (p.partition == SINGLE or site.state in p.homes or served):
                return (), (
                    f"pass {p.stage!r} neither holds {site.state!r} nor is sent its values "
                    f"for {site.handler}"
                )
            try:
                hook = hook_source(site, slot, list(columns), sink="_rs_hv", positioned=True)
            except KeyError:
                return (
                    (),
                    f"the key {site.text} of {site.handler} uses a column that does not travel",
                )
            out.append((slot, h, site.state, site.text, hook))
        return tuple(out), None

    def take_passes(self, blobs: list[bytes]) -> None:
        """The probes from the pass tasks' rows: each put in log order by ``(ts, lsn)``."""
        got: dict[int, list] = {}
        for blob in blobs:
            for slot, part in pickle.loads(blob).items():
                got.setdefault(slot, []).append(part)
        for slot, (sig, _site) in enumerate(self.sites):
            parts = got.get(slot, [])
            if not parts:
                self._add_items(sig, [])
                continue
            ts = np.concatenate([p[0] for p in parts])
            lsn = np.concatenate([p[1] for p in parts])
            values = [v for p in parts for v in p[2]]
            absent = np.concatenate([p[3] for p in parts])
            order = np.lexsort((lsn, ts))
            items = [values[i] for i in order]
            for i in np.flatnonzero(absent[order]):
                items[i] = ABSENT
            self._add_items(sig, items)
        self.how += (
            f"recorded on Spark: {len(self.sites)} probe(s) evaluated by the tasks that run "
            "their reading handlers, put in log order in the driver"
        )

    # -- both ----------------------------------------------------------------------------------

    def _expected(self, sig: Any) -> int:
        counts = self.log.describe().counts  # (the manifest's: no row read)
        return sum(counts.get(kind, 0) for kind in sig.kinds)

    def _check(self, sig: Any, n: int) -> None:
        want = self._expected(sig)
        if n != want:
            raise RuntimeError(
                f"spark history: the probe of {sig.state}[{sig.key}] got {n:,} values for "
                f"{want:,} events of {', '.join(sig.kinds)}"
            )

    def _add(self, sig: Any, value: pa.Array, absent: np.ndarray) -> None:
        value = value.combine_chunks() if isinstance(value, pa.ChunkedArray) else value
        self._check(sig, len(value))
        encoded = encode_arrow(value, absent)
        if encoded is None:  # not one plain type: the serial engine's own encoding
            items = value.to_pylist()
            for i in np.flatnonzero(absent):
                items[i] = ABSENT
            self._add_items(sig, items)
            return

        self.history.probes[sig] = RecordedProbe(sig, *encoded)

    def _add_items(self, sig: Any, items: list) -> None:
        self._check(sig, len(items))
        self.history.add_probe(sig, items)

    def finish(self, last_ts: int | None) -> Any:
        """The history, with the time of the last event the run ran."""
        self.history.last_ts = last_ts
        return self.history


def encode_arrow(value: pa.Array, absent: np.ndarray) -> tuple | None:
    """``(value, encoding, absent)`` exactly as ``recorder.encode_probe`` stores the Python
    values of ``value`` (ABSENT where ``absent``), or None when that needs the Python values
    (a None among the values, no value at all, or not one of int, float, str, bool)."""
    n = len(value)
    absent = np.asarray(absent, dtype=bool)
    mask = pa.array(absent, pa.bool_())
    if n == 0 or absent.all():
        return None
    if pc.any(pc.and_(value.is_null(), pc.invert(mask))).as_py():
        return None
    t = value.type
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        value, t = value.cast(pa.string()), pa.string()
    if t not in (pa.int64(), pa.float64(), pa.string(), pa.bool_()):
        return None
    has_absent = bool(absent.any())
    nulls = pa.nulls(n, t)
    if t != pa.float64():
        arr = pc.if_else(mask, nulls, value) if has_absent else value
        return arr, str(t), (arr.is_null() if has_absent else None)
    if not has_absent:  # as pyarrow's from_pandas: a NaN value is stored as null
        return pc.if_else(pc.is_nan(value), nulls, value), str(t), None
    return pc.if_else(mask, nulls, value), str(t), mask


# -- the prefix path: probes as columns of an epoch ---------------------------------------


class PrefixProbes:
    """What the epochs' tasks of round ``round`` evaluate: ``(slot, handler, state, key)``."""

    def __init__(self, specs: tuple, round_: int):
        self.specs = specs
        self.round = round_

    def columns(self, ep: Any) -> dict[int, bytes]:
        """Each probe over the epoch's events of its reader's kinds: ``v`` and ``a`` (absent),
        as Arrow IPC."""
        out = {}
        for slot, h, state, key in self.specs:
            sink = io.BytesIO()
            _probe_frame(ep, h, state, key).write_ipc(sink)
            out[slot] = sink.getvalue()
        return out


def _from_ipc(data: bytes) -> pl.DataFrame:
    return pl.read_ipc(io.BytesIO(data))


def _probe_frame(ep: Any, h: int, state: str, key: tuple) -> pl.DataFrame:
    """``store.get(key, ABSENT)`` before handler ``h`` runs, at every event of its kinds.

    The epoch's own read (``prefix._columnar._Epoch.read``) gives the state's default where the store
    has no value; a probe tells the two apart, so this looks up the same writes and base
    keeping whether the key was there: a merge state holds a key once any merge reached it,
    a set state while its last write is not a delete."""
    info = ep.low.states[state]
    # As operation 0 of the handler: before its own operations.
    requests, on = _keyed(ep.requests(h, key, 0), info)
    requests = _with_base(ep, requests, state, info, on)
    got = ep.last_writes(state, info, requests, on)
    if info.kind == "merge":
        present = pl.col("_run").is_not_null() | pl.col("_bp")
        value = (
            pl.lit(info.default, dtype=pl.Int64)
            + pl.col("_base").fill_null(0)
            + pl.col("_run").fill_null(0)
        )
    else:
        hit = pl.col("_hit").is_not_null()
        present = pl.when(hit).then(~pl.col("_del")).otherwise(pl.col("_bp"))
        value = pl.when(hit).then(pl.col("v")).otherwise(pl.col("_base"))
    dtype = pl.Int64 if info.kind == "merge" else _dtype(info.value_type)
    return got.select(
        pl.when(present).then(value.cast(dtype)).otherwise(None).alias("v"),
        (~present).alias("a"),
    )


def _with_base(ep: Any, got: pl.DataFrame, state: str, info: Any, on: list) -> pl.DataFrame:
    """``got`` with each key's value when the epoch began (``_base``) and whether the store
    held it then (``_bp``), from the earlier epochs' deltas."""
    if state not in ep.bases:
        ep.bases[state] = ep.base_of(state)
    deltas = ep.bases[state]
    dtype = pl.Int64 if info.kind == "merge" else _dtype(info.value_type)
    if deltas is None or not deltas.height or not got.height:
        return got.with_columns(
            pl.lit(None, dtype=dtype).alias("_base"), pl.lit(False).alias("_bp")
        )
    deltas = _keyed(_align(deltas, got), info)[0]
    deltas = deltas.join(got.select(on).unique(), on=on, how="semi", nulls_equal=True)
    base = _keyed(combine_deltas([deltas], info), info)[0]
    base = base.select([*on, pl.col("v").cast(dtype).alias("_base"), pl.lit(True).alias("_bp")])
    got = got.join(base, on=on, how="left", nulls_equal=True, maintain_order="left")
    return got.with_columns(pl.col("_bp").fill_null(False))


def _lowered_key(key: ast.expr, event_arg: str) -> tuple | None:
    """A read site's key as the lowered expressions ``compiler.lower`` makes of it (None when
    it is not made of event fields, constants, ``+ - *`` and negation)."""

    def expr(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float, str, bool):
            return Lit(node.value)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == event_arg
        ):
            return Col(node.attr)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return Neg(expr(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
            return Arith(_ARITH[type(node.op)], expr(node.left), expr(node.right))
        raise ValueError(node)

    parts = key.elts if isinstance(key, ast.Tuple) else [key]
    try:
        return tuple(expr(p) for p in parts)
    except ValueError:
        return None


_ARITH = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}


# -- the pass path: hooks in the tasks ------------------------------------------------------


class TaskHistory:
    """The values one pass task records (``spec.history``: see :meth:`SparkHistory.pass_sites`)."""

    def __init__(self, sites: tuple, program: Any, stores: dict):
        self.sites = sites
        self.program = program
        self.stores = stores
        self.lists: dict[int, list] = {slot: [] for slot, *_rest in sites}

    def plain_hooks(self) -> tuple[list, dict]:
        """Statements for the serial engine's loop (``compile_program(hooks=...)``), placed
        just before the reading handler. The plain pass adds them after its own hooks that
        put upstream values in place, and hooks at one place run in the order given, so
        they see those values."""
        hooks, names = [], {"_rs_ABSENT": ABSENT}
        handlers = self.program.handlers
        for slot, h, _state, _key, hook in self.sites:
            names[f"_rs_hv{slot}"] = self.lists[slot].append
            for kind in handlers[h].kinds:
                hooks.append((h, kind, hook))
        return hooks, names

    def hook(self, h: int) -> Any:
        """For the general pass loop: a function ``(ev, pos)`` that records handler ``h``'s
        probes at log events (None when it reads none)."""
        mine = [
            (self.lists[slot].append, self.stores[state], key_function(key, self.program))
            for slot, hh, state, key, _hook in self.sites
            if hh == h
        ]
        if not mine:
            return None

        def record(ev: Any, pos: tuple) -> None:
            if pos[1] != PH_LOG or pos[3].startswith(AFTER_RUN):
                return  # the serial loop records at log events only
            for append, d, key_fn in mine:
                try:
                    value = d.get(key_fn(ev), ABSENT)
                except Exception:  # noqa: BLE001 - the handler's own read raises it
                    value = ABSENT
                append((pos[0], pos[2], value))

        return record

    def blob(self) -> bytes:
        """What the task sends the driver: slot -> (ts, lsn, values, absent)."""
        out = {}
        for slot, items in self.lists.items():
            n = len(items)
            ts = np.fromiter((x[0] for x in items), np.int64, n)
            lsn = np.fromiter((x[1] for x in items), np.int64, n)
            absent = np.fromiter((type(x[2]) is type(ABSENT) for x in items), bool, n)
            values = [None if a else x[2] for x, a in zip(items, absent)]
            out[slot] = (ts, lsn, values, absent)
        return dumps(out)

    def row(self) -> tuple:
        """The task's output row (``passes._rows`` layout) carrying :meth:`blob`."""
        return for_driver(HIST, self.blob())
