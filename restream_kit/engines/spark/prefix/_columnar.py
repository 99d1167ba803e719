"""One epoch of a lowered program, evaluated as columns with polars (the prefix path's task).

Given the epoch's events, and for every state the values it had when the epoch began (its
*base*: built from the deltas of earlier epochs), :func:`run_epoch` evaluates round ``job``
of a :class:`restream_kit.compiler.lower.Lowered` program:

- the writes of states at level ``job`` become this epoch's *delta* per state: per key, the
  sum of merges, or the last overwrite or delete;
- emits at level ``job`` become rows;
- reads are as-of lookups inside the epoch: the reads and the writes of a state, each with
  its position ``(order, handler, operation)`` packed into one integer, are as-of joined by
  key and position (each read meets its key's running sum, or last write, at that point),
  then added to or replaced by the base, which is folded from the earlier epochs' deltas of
  only the keys the epoch reads. Writes of lower levels are recomputed here, which is cheap
  next to moving them.

Semantics follow the serial engine exactly because lowering only admits expressions whose
column evaluation cannot differ from Python's (see ``restream_kit.compiler.lower``), and
``restream_kit.compiler.columns`` evaluates them (as the column re-run of changed stages does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from ....compiler.columns import ColumnEvaluator, read_column, type_class
from ....compiler.lower import Col, Expr, Lowered, low_reads, walk

__all__ = [
    "run_epoch",
    "positions_per_event",
    "combine_deltas",
    "needed_columns",
    "epoch_of",
    "DELTA_CHUNK",
    "read_states",
]

#: Column naming the epoch a delta row comes from.
DELTA_CHUNK = "_chunk"


def positions_per_event(low: Lowered) -> tuple[int, int]:
    """(handlers, operations per handler) + 1 each: the radix of packed positions."""
    return len(low.kinds) + 1, low.ops_per_handler + 1


class _Epoch:
    def __init__(self, low: Lowered, events: pl.DataFrame, lo: int, bases, carried):
        self.low = low
        self.n = events.height
        self.df = events.with_columns(pl.int_range(lo, lo + self.n, dtype=pl.Int64).alias("_o"))
        self.base_of = bases
        self.bases: dict[str, pl.DataFrame | None] = {}
        h, k = positions_per_event(low)
        self.per_event = h * k
        self.per_handler = k
        self.masks: dict[int, pl.Series] = {}
        self.reads: dict[int, pl.Series] = dict(carried)
        self.writes: dict[str, pl.DataFrame] = {}
        fields = {c: type_class(t) for c, t in events.schema.items()}
        reads = {r.index: low.states[r.state].value_type for r in low.reads}
        self.ev = ColumnEvaluator({c: t for c, t in fields.items() if t is not None}, reads)

    # -- expressions ------------------------------------------------------------------------

    def mask(self, handler: int) -> pl.Series:
        if handler not in self.masks:
            kinds = list(self.low.kinds[handler])
            self.masks[handler] = self.df.get_column("kind").is_in(kinds).fill_null(False)
        return self.masks[handler]

    def frame(self, *uses: Any) -> pl.DataFrame:
        """The epoch's events with the columns of the reads ``uses`` (expressions) need."""
        sites = sorted(low_reads(*uses))
        if not sites:
            return self.df
        return self.df.with_columns([self.read(s).alias(read_column(s)) for s in sites])

    def picked(self, handler: int, when: Expr | None, named: dict, *uses: Any) -> pl.DataFrame:
        """The ``named`` polars expressions (over the columns of the expressions ``uses``) at
        the events of ``handler`` where ``when`` holds, in event order."""
        frame = self.frame(when, *uses).filter(self.mask(handler))
        if when is not None:
            frame = frame.filter(self.ev.truth(when))
        # with_columns, not select: a constant (a key ``m[0]``) stands at every event.
        return frame.with_columns(**named).select(list(named))

    def position(self, handler: int, n: int) -> pl.Expr:
        """The packed position of operation ``n`` of ``handler`` at each event."""
        return pl.col("_o") * self.per_event + (handler * self.per_handler + n)

    def requests(self, handler: int, key: tuple, n: int) -> pl.DataFrame:
        """A read's requests at the events of ``handler``: its key parts ``k0``, ``k1`` ...
        and its position ``_p`` (as operation ``n``), in event order."""
        named = {f"k{i}": self.ev.value(k) for i, k in enumerate(key)}
        named["_p"] = self.position(handler, n)
        return self.picked(handler, None, named, key)

    # -- writes and reads -------------------------------------------------------------------

    def write_rows(self, state: str) -> pl.DataFrame:
        """Every write into ``state`` made in this epoch, keyed, sorted by position."""
        if state in self.writes:
            return self.writes[state]
        info = self.low.states[state]
        frames = []
        for w in self.low.writes_of(state):
            named = {f"k{i}": self.ev.value(k) for i, k in enumerate(w.key)}
            named["_p"] = self.position(w.handler, w.n)
            if info.kind == "merge":
                named["v"] = self.ev.value(w.value).cast(pl.Int64)
            else:
                value = self.ev.value(w.value) if w.op == "set" else pl.lit(None)
                named["v"] = value.cast(_dtype(info.value_type))
                named["_del"] = pl.lit(w.op == "delete", dtype=pl.Boolean)
            frames.append(self.picked(w.handler, w.when, named, w.key, w.value))
        if not frames:
            frames.append(self.empty_writes(info))
        out = pl.concat(frames, how="vertical_relaxed").sort("_p")
        self.writes[state] = out
        return out

    def empty_writes(self, info) -> pl.DataFrame:
        cols = {f"k{i}": pl.Series([], dtype=pl.Null) for i in range(info.arity)}
        cols["_p"] = pl.Series([], dtype=pl.Int64)
        cols["v"] = pl.Series(
            [], dtype=pl.Int64 if info.kind == "merge" else _dtype(info.value_type)
        )
        if info.kind == "set":
            cols["_del"] = pl.Series([], dtype=pl.Boolean)
        return pl.DataFrame(cols)

    def read(self, site: int) -> pl.Series:
        """Read site ``site``'s value at every event of its handler (None elsewhere)."""
        if site in self.reads:
            return self.reads[site]
        r = self.low.reads[site]
        info = self.low.states[r.state]
        if info.kind == "merge" and self.inline(r):
            return self.read_inline(r)
        requests, on = _keyed(self.requests(r.handler, r.key, r.n), info)
        got = self.with_base(self.last_writes(r.state, info, requests, on), r.state, info, on)
        default = info.default
        if info.kind == "merge":
            # The deltas are sums of merges only: the default is added once, here.
            out = (
                pl.lit(default, dtype=pl.Int64)
                + pl.col("_base").fill_null(0)
                + pl.col("_run").fill_null(0)
            )
        else:
            fallback = pl.coalesce(pl.col("_base"), _lit(default, info))
            out = (
                pl.when(pl.col("_hit").is_null())
                .then(fallback)
                .when(pl.col("_del"))
                .then(_lit(default, info))
                .otherwise(pl.col("v"))
            )
        values = got.select(out.alias("v")).get_column("v")  # requests stay in event order
        return self.spread(site, self.mask(r.handler), values)

    def last_writes(self, state: str, info, requests: pl.DataFrame, on: list) -> pl.DataFrame:
        """``requests`` (keyed, sorted by ``_p``), each with the last write of its key at or
        before its position: ``_run`` (a merge state's running sum) or ``v``, ``_del`` and
        ``_hit`` (null where no write came before)."""
        writes = _keyed(_align(self.write_rows(state), requests), info)[0]
        if info.kind == "merge":
            writes = writes.with_columns(pl.col("v").cum_sum().over(on).alias("_run"))
            found = ["_run"]
        else:
            writes = writes.with_columns(pl.lit(True).alias("_hit"))
            found = ["v", "_del", "_hit"]
        # Writes and requests are both sorted by position; a write at a request's own
        # position precedes it.
        left, right, by = _null_safe(requests, writes.select([*on, "_p", *found]), on)
        return left.join_asof(right, on="_p", by=by, strategy="backward", check_sortedness=False)

    def spread(self, site: int, keep: pl.Series, values: pl.Series) -> pl.Series:
        """Values of the events ``keep`` selects, as a column over every event."""
        full = pl.repeat(None, self.n, dtype=values.dtype, eager=True).alias(f"_r{site}")
        full = full.scatter(np.flatnonzero(keep.to_numpy()), values)
        self.reads[site] = full
        return full

    def inline(self, r) -> bool:
        """Is every write of ``r``'s (merge) state made by events ``r`` reads, at ``r``'s key?"""
        kinds = set(self.low.kinds[r.handler])
        return all(
            set(self.low.kinds[w.handler]) == kinds and w.key == r.key
            for w in self.low.writes_of(r.state)
        )

    def read_inline(self, r) -> pl.Series:
        """A merge state read where it is written: a running sum per key over those events.

        The running sum includes the event's own merges; those made after the read (by later
        handlers, or later in the same one) are taken off again."""
        info = self.low.states[r.state]
        named = {f"k{i}": self.ev.value(k) for i, k in enumerate(r.key)}
        every = after = None
        uses = [r.key]
        for w in self.low.writes_of(r.state):
            c = self.ev.value(w.value) * self.ev.truth(w.when).cast(pl.Int64)
            every = c if every is None else every + c
            if (w.handler, w.n) > (r.handler, r.n):
                after = c if after is None else after + c
            uses += [w.value, w.when]
        named["_c"] = every
        named["_a"] = after if after is not None else pl.lit(0, dtype=pl.Int64)
        got, on = _keyed(self.picked(r.handler, None, named, *uses), info)
        got = got.with_columns((pl.col("_c").cum_sum().over(on) - pl.col("_a")).alias("_run"))
        got = self.with_base(got, r.state, info, on)
        value = pl.lit(info.default, dtype=pl.Int64) + pl.col("_base").fill_null(0) + pl.col("_run")
        values = got.select(value.alias("v")).get_column("v")
        return self.spread(r.index, self.mask(r.handler), values)

    def with_base(self, got: pl.DataFrame, state: str, info, on: list[str]) -> pl.DataFrame:
        """``got`` with each key's value when the epoch began in ``_base`` (None if none).

        The earlier epochs' deltas are cut down to the keys ``got`` holds before they are
        folded: an epoch reads few of the keys all the epochs before it wrote."""
        if state not in self.bases:
            self.bases[state] = self.base_of(state)
        deltas = self.bases[state]
        dtype = pl.Int64 if info.kind == "merge" else _dtype(info.value_type)
        if deltas is None or not deltas.height or not got.height:
            return got.with_columns(pl.lit(None, dtype=dtype).alias("_base"))
        deltas = _keyed(_align(deltas, got), info)[0]
        if len(on) == 1:
            wanted = got.get_column(on[0])
            hit = pl.col(on[0]).is_in(wanted.drop_nulls().unique().implode())
            if wanted.null_count():
                hit = hit | pl.col(on[0]).is_null()
            deltas = deltas.filter(hit)
        else:
            deltas = deltas.join(got.select(on).unique(), on=on, how="semi", nulls_equal=True)
        base = _keyed(combine_deltas([deltas], info), info)[0]
        base = base.select([*on, pl.col("v").cast(dtype).alias("_base")])
        return got.join(base, on=on, how="left", nulls_equal=True, maintain_order="left")

    # -- what a round returns ---------------------------------------------------------------

    def delta(self, state: str, chunks: tuple[int, list[int]] | None = None) -> pl.DataFrame:
        """The epoch's delta of ``state``: per key, the sum of its merges or its last write.

        ``chunks`` (the first chunk's number, the positions where the epoch's chunks start)
        asks for one delta per chunk instead, each row's chunk in :data:`DELTA_CHUNK`, in
        chunk order: a task that runs several of a checkpoint's epochs at once."""
        info = self.low.states[state]
        keys = [f"k{i}" for i in range(info.arity)]
        rows = self.write_rows(state)
        if chunks is not None:
            # Writes are sorted by position, so chunks come in order and so do their groups.
            at = rows.get_column("_p") // self.per_event
            rows = rows.with_columns(epoch_of(at, *chunks).alias(DELTA_CHUNK))
            keys = [DELTA_CHUNK, *keys]
        if info.kind == "merge":
            return rows.group_by(keys, maintain_order=True).agg(pl.col("v").sum())
        return rows.group_by(keys, maintain_order=True).agg(
            pl.col("v").last(), pl.col("_del").last()
        )

    def emitted(self, site_index: int) -> pl.DataFrame:
        site = self.low.emits[site_index]
        named = {"_o": pl.col("_o")}
        named.update((f"f_{name}", self.ev.value(x)) for name, x in site.fields)
        return self.picked(site.handler, site.when, named, *(x for _n, x in site.fields))


def _dtype(value_type: str) -> Any:
    return {"int": pl.Int64, "float": pl.Float64, "bool": pl.Boolean, "str": pl.String}[value_type]


def _lit(value: Any, info) -> pl.Expr:
    return pl.lit(value, dtype=_dtype(info.value_type))


def _align(frame: pl.DataFrame, like: pl.DataFrame) -> pl.DataFrame:
    """Cast ``frame``'s key columns to ``like``'s dtypes, so that joins and concats agree."""
    casts = [
        pl.col(c).cast(like.schema[c])
        for c in frame.columns
        if c.startswith("k") and c in like.schema and frame.schema[c] != like.schema[c]
    ]
    return frame.with_columns(casts) if casts else frame


def _keyed(frame: pl.DataFrame, info) -> tuple[pl.DataFrame, list[str]]:
    """The frame with the columns to group and join it by: its key parts, or one packed key."""
    if info.packing is None:
        return frame, [f"k{i}" for i in range(info.arity)]
    packed, stride = None, 1
    for i in reversed(range(info.arity)):
        lowest, span = info.packing[i]
        term = (pl.col(f"k{i}").cast(pl.Int64) - lowest) * stride
        packed = term if packed is None else packed + term
        stride *= span
    return frame.with_columns(packed.alias("_k")), ["_k"]


def _null_safe(
    left: pl.DataFrame, right: pl.DataFrame, on: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """Frames to as-of join ``by`` key columns in which None equals None (as it does for
    Python's dict keys): a key column holding None becomes a flag and a filled value."""
    by = []
    fills = []
    for c in on:
        if left.get_column(c).null_count() or right.get_column(c).null_count():
            by += [c, f"{c}_none"]
            dtype = left.schema[c] if left.schema[c] != pl.Null else pl.Int64
            zero = {pl.String: "", pl.Boolean: False}.get(dtype, 0)
            fill = pl.col(c).cast(dtype).fill_null(pl.lit(zero).cast(dtype))
            fills += [pl.col(c).is_null().alias(f"{c}_none"), fill.alias(c)]
        else:
            by.append(c)
    if not fills:
        return left, right, on
    return left.with_columns(fills), right.with_columns(fills), by


def combine_deltas(deltas: list[pl.DataFrame], info) -> pl.DataFrame:
    """Deltas of consecutive epochs (with ``_chunk``) folded into one value per key."""
    keys = [f"k{i}" for i in range(info.arity)]
    both = pl.concat(deltas, how="diagonal_relaxed")
    if info.kind == "merge":
        return both.group_by(keys).agg(pl.col("v").sum())
    # Deltas come in epoch order, so the last row of a key is its latest write.
    both, on = _keyed(both, info)
    out = both.unique(subset=on, keep="last")
    return out.filter(~pl.col("_del")).select([*keys, "v"])


def epoch_of(positions: pl.Series, first: int, starts: list[int]) -> pl.Series:
    """The epoch of each log position: ``first`` for those from ``starts[0]``, ``first + 1``
    from ``starts[1]``, and so on (``starts`` ascending, every position at or after the first)."""
    bounds = pl.Series(starts, dtype=pl.Int64)
    within = bounds.search_sorted(positions.cast(pl.Int64), side="right").cast(pl.Int32)
    return within + (first - 1)


def run_epoch(
    low: Lowered,
    events: pa.Table,
    lo: int,
    job: int,
    bases: Callable[[str], pl.DataFrame | None],
    carried: dict[int, pl.Series],
    also: Callable[[Any], None] | None = None,
    chunks: tuple[int, list[int]] | None = None,
) -> tuple[dict[str, pl.DataFrame], dict[int, pl.DataFrame], dict[int, pl.Series]]:
    """Round ``job`` of one epoch: deltas of the states at that level, rows of its emits, and
    the read columns later rounds will need (``carried`` holds those of earlier rounds).
    ``also(epoch)`` evaluates more over the same epoch (a run's history probes). With
    ``chunks`` (see ``_Epoch.delta``) the deltas are per chunk, tagged with :data:`DELTA_CHUNK`.

    ``bases(state)`` gives the deltas of ``state`` made by the epochs before this one, in epoch
    order (None for none; called only when needed)."""
    ep = _Epoch(low, pl.from_arrow(events), lo, bases, carried)
    deltas = {
        name: ep.delta(name, chunks)
        for name, info in low.states.items()
        if info.level == job and low.writes_of(name)
    }
    emits = {i: ep.emitted(i) for i, site in enumerate(low.emits) if site.level == job}
    if also is not None:
        also(ep)
    later = later_reads(low, job)
    keep = {site: col for site, col in ep.reads.items() if site in later and site not in carried}
    return deltas, emits, keep


def later_reads(low: Lowered, job: int) -> set[int]:
    """Read sites that rounds after ``job`` use, directly or through the writes they need."""
    return _reads_of(low, lambda level: level > job)


def read_states(low: Lowered, job: int) -> set[str]:
    """The states whose values before an epoch round ``job`` may read (its base): those of
    the reads its writes and emits use, directly or through the writes they need. Round
    ``job``'s tasks are sent the deltas of these only."""
    return {low.reads[site].state for site in _reads_of(low, lambda level: level == job)}


def _reads_of(low: Lowered, at: Callable[[int], bool]) -> set[int]:
    """Read sites the writes and emits of the levels ``at`` accepts use, directly or through
    the writes they need."""
    wanted: set[int] = set()
    for w in low.writes:
        if at(low.states[w.state].level):
            wanted |= low_reads(w.key, w.value, w.when)
    for e in low.emits:
        if at(e.level):
            wanted |= low_reads(e.when, *(v for _n, v in e.fields))
    # A read needs the writes of its state, and those may read other states in turn.
    todo = list(wanted)
    while todo:
        r = low.reads[todo.pop()]
        for w in low.writes_of(r.state):
            for site in low_reads(w.key, w.value, w.when) - wanted:
                wanted.add(site)
                todo.append(site)
    return wanted


def needed_columns(low: Lowered) -> list[str]:
    """The log columns a lowered program touches (``kind`` always)."""
    exprs: list[Any] = [r.key for r in low.reads]
    exprs += [(w.key, w.value, w.when) for w in low.writes]
    exprs += [(e.when, tuple(v for _n, v in e.fields)) for e in low.emits]
    cols = dict.fromkeys(["kind", *(x.name for x in walk(*exprs) if isinstance(x, Col))])
    return list(cols)
