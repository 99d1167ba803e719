"""Checkpoints on the prefix path: each epoch committed from the deltas the rounds brought back.

The prefix path cuts the log into the checkpoint's epochs and brings every epoch's state
deltas to the driver (``prefix._driver.run_prefix``; several epochs run in one task, their deltas
and rows kept apart). The state after epoch ``k`` is the deltas of
epochs ``0..k`` folded in order, exactly as ``prefix._assembly.final_state`` folds all of them: a merge
state's value is its default plus the sums, an overwritten state's the last write, a delete
removes the key. So once the rounds are done the driver walks the epochs in order, updates
one dict per state with that epoch's changed keys, and commits it, in the serial engine's
state form (:func:`restream_kit.io.checkpoint.serial_state`), with the epoch's rows as the
serial engine keeps them, ``(lsn, ts, handler, seq, fields)``. A lowered program makes no timed
writes and schedules nothing, so ``future`` and ``scheduled`` are empty and ``order`` (the
serial runtime's counter of both) is 0. A resume or ``start_from`` of such a checkpoint, on
either engine, reads what a serial checkpoint holds.

A resume of the same program continues here too (``start_deltas``): the committed state is
the delta of an epoch before every other (chunk -1), and the epochs after it run as usual.

A commit is written on the checkpoint's writer thread while the next epoch folds
(``Checkpointer.commit_soon``), so it takes a copy of each small dict; the last epoch's
dicts are the replay's final state. A big state is kept
as columns instead (:class:`_Kept`), folded with polars joins epoch by epoch, committed as
those columns, and made a dict once at the end: walking a dict of 144,000 tuple keys into
columns at every commit cost most of a checkpoint's time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa

from ....compiler.lower import Lowered
from ....io._arrow_stores import StoreColumns, store_columns, store_from_table
from ....io.checkpoint import Checkpointer, Start, state_declarations
from ....io.epochs import Epoch, cut
from ....io.progress import EpochFinished, EpochStarted
from ....model.program import Program
from ._columnar import DELTA_CHUNK
from ._epoch_rows import EpochTables, joined
from ._epoch_rows import rows_by_chunk as committed_rows

__all__ = [
    "Carried",
    "commit_epochs",
    "remaining",
    "why_not_resumed",
    "start_deltas",
]


def commit_epochs(
    ck: Checkpointer,
    low: Lowered,
    program: Program,
    log: Any,
    epoch: Any,
    deltas: dict[str, list[pl.DataFrame]],
    emitted: dict[int, list[tuple[int, pl.DataFrame]]],
    made: EpochTables,
    notify: Any,
    check_cancel: Any = None,
    start: Start | None = None,
    until: int | None = None,
) -> tuple[dict[str, dict] | Carried, dict[int, dict[str, list]]]:
    """Commit every epoch of ``cut(log, epoch)`` to ``ck`` (those after ``start``, a resume);
    the final state (a wave's :class:`Carried`) and each committed epoch's rows (by epoch
    number).

    ``deltas`` and ``emitted`` are ``run_prefix``'s, by chunk (``prefix._spans``: an epoch, or
    a piece of one), ``made`` the output tables cut at the chunks and the epoch of each chunk
    (for the ``EpochFinished`` events, and committed as they are where their columns are
    plain: ``_epoch_rows``).
    ``check_cancel()`` runs before each commit: a cancelled replay stops between epochs, the
    ones committed intact, as on the pass path. ``until``: the last epoch to commit (a
    wave's; the checkpoint is complete only when it is None)."""
    epochs = remaining(cut(log, epoch), start, until)
    pieces: dict[int, list[int]] = {}  # an epoch's chunks (``prefix._spans``)
    for chunk, owner in enumerate(made.owners):
        pieces.setdefault(owner, []).append(chunk)
    by_chunk = {name: _split(frames) for name, frames in deltas.items()}
    rows_by_chunk = committed_rows(low, log, emitted, made)
    stores: dict[str, dict] = {name: {} for name in program.states}
    declared = state_declarations(program)
    tables: dict[str, None] = {}  # tables emitted so far, in order of first emission
    kept: dict[str, _Kept] = {}
    if isinstance(start, Carried):  # the wave before's values, as it kept them
        stores.update(start.stores)
        kept.update(start.kept)
    elif start is not None:
        for name, values in start.state["stores"].items():
            stores[name] = dict(values)
    if start is not None:  # (a resume that read its rows, or only their tables' names)
        tables.update(dict.fromkeys(start.tables))
        for rows in start.rows:
            tables.update(dict.fromkeys(rows))
    for name in by_chunk:
        if name not in kept:
            kept[name] = _Kept(low.states[name], stores[name])
    committed = {}
    for ep in epochs:
        if check_cancel is not None:
            check_cancel()
        notify(EpochStarted(ep.index, len(ep)))
        started = time.perf_counter()
        mine = pieces.get(ep.index, [])
        for name, parts in by_chunk.items():
            for chunk in mine:
                frame = parts.get(chunk)
                if frame is not None:
                    kept[name].fold(frame)
        new_rows = joined([rows_by_chunk.get(chunk, {}) for chunk in mine])
        tables.update(dict.fromkeys(new_rows))
        state = {
            "states": declared,
            "stores": {  # (dicts copied: the commit is written while the next epoch folds)
                name: kept[name].committed() if name in kept else dict(store)
                for name, store in stores.items()
            },
            "future": [],
            "scheduled": [],
            "order": 0,
            "scheduled_per_root": {},
            "quarantined": [],
        }
        last = ep is epochs[-1] and until is None
        committed[ep.index] = {t: new_rows.get(t, []) for t in tables}
        ck.commit_soon(ep.index, ep.stop, state, committed[ep.index], last=last)
        if last:
            ck.flush()  # (a replay returns with its checkpoint complete)
        outputs = made.outputs(mine)
        # Every event of the log has run: all rows are final.
        notify(EpochFinished(ep.index, ep.stop, time.perf_counter() - started, outputs, None))
    if until is not None:  # a wave: the next one starts from these values as they are
        plain = {name: store for name, store in stores.items() if name not in kept}
        return _carried(epochs, start, kept, plain, list(tables)), committed
    return {
        name: kept[name].final() if name in kept else store for name, store in stores.items()
    }, committed


def remaining(epochs: list[Epoch], start: Start | None, until: int | None = None) -> list[Epoch]:
    """The epochs a replay runs: all, or those after ``start``'s events; up to epoch
    ``until`` when it is not None (a wave's last)."""
    if until is not None:
        epochs = [e for e in epochs if e.index <= until]
    if start is None:
        return epochs
    return [Epoch(e.index, max(e.start, start.done), e.stop) for e in epochs if e.stop > start.done]


def why_not_resumed(start: Start | None) -> str | None:
    """Why the prefix path cannot continue from ``start`` (None when it can, or there is none).

    It continues a resume only: the same program over the same log (the checkpoint's
    identity), so the committed values are ones the lowering's types, bounds and key
    packing already cover. Timed writes, scheduled events or rolled-back runs in the state
    come from a replay the prefix path does not make."""
    if start is None:
        return None
    state = start.state
    if state.get("future") or state.get("scheduled") or state.get("quarantined"):
        return "a checkpoint holding timed writes, scheduled events or quarantined runs"
    return None


@dataclass
class Carried:
    """Where a wave (``_waves``) left the state, for the next wave of the same replay: the
    values as :class:`_Kept` holds them (columns stay columns), the states no epoch wrote
    (``stores``), and the names of the tables emitted so far (their rows stay in the
    checkpoint, which the replay's tables are read back from: ``_waves``). It stands for the
    :class:`Start` a resume would read back from the checkpoint, without reading it."""

    epoch: int
    done: int
    kept: dict[str, Any]
    stores: dict[str, dict]
    tables: list[str]
    resumed: bool = True
    rows: tuple = ()  # (none: as a :class:`Start` that did not read its rows)

    @property
    def next_epoch(self) -> int:
        return self.epoch + 1


def _carried(epochs: list[Epoch], start: Any, kept: dict, stores: dict, tables: list) -> Carried:
    """Where a wave that committed ``epochs`` (from ``start``) leaves the next one."""
    if not epochs:
        return Carried(start.epoch, start.done, kept, stores, tables)
    return Carried(epochs[-1].index, epochs[-1].stop, kept, stores, tables)


def start_deltas(low: Lowered, start: Start | Carried | None) -> dict[str, list[pl.DataFrame]]:
    """The committed state as a delta of an epoch before all others (chunk -1): what the
    epochs after it read as their base, and fold into the final state."""
    deltas: dict[str, list[pl.DataFrame]] = {}
    if start is None:
        return deltas
    if isinstance(start, Carried):
        for name, kept in start.kept.items():
            if kept.frame is not None:
                deltas[name] = [_frame_delta(kept.frame, low.states[name])]
        values_of = {
            **start.stores,
            **{name: k.store for name, k in start.kept.items() if k.frame is None},
        }
    else:
        values_of = start.state["stores"]
    for name, values in values_of.items():
        info = low.states.get(name)
        if info is None or not values:
            continue
        keys = list(values)
        parts = list(zip(*keys)) if info.tuple_key else [keys]
        columns = {f"k{i}": list(part) for i, part in enumerate(parts)}
        if info.kind == "merge":
            # A merge delta holds the sums only: the default is added when read.
            columns["v"] = [v - info.default for v in values.values()]
        else:
            columns["v"] = list(values.values())
            columns["_del"] = [False] * len(keys)
        frame = pl.DataFrame(columns)
        deltas[name] = [frame.with_columns(pl.lit(-1, dtype=pl.Int32).alias(DELTA_CHUNK))]
    return deltas


def _frame_delta(frame: pl.DataFrame, info: Any) -> pl.DataFrame:
    """A state's values held as columns (``_Kept.frame``) as the delta ``start_deltas`` makes."""
    if info.kind == "merge":  # a merge delta holds the sums only
        delta = frame.with_columns(pl.col("v") - info.default)
    else:
        delta = frame.with_columns(pl.lit(False).alias("_del"))
    return delta.with_columns(pl.lit(-1, dtype=pl.Int32).alias(DELTA_CHUNK))


def _split(frames: list[pl.DataFrame]) -> dict[int, pl.DataFrame]:
    """A state's deltas by chunk (each task sends one per epoch; empty ones change nothing)."""
    out = {}
    for frame in frames:
        if frame.height:
            for (chunk,), part in frame.partition_by(DELTA_CHUNK, as_dict=True).items():
                out[chunk] = part
    return out


def _apply(store: dict, delta: pl.DataFrame, info: Any) -> None:
    """Fold one epoch's delta of a state into ``store`` (as ``prefix._assembly.final_state`` folds)."""
    parts = [delta.get_column(f"k{i}").to_list() for i in range(info.arity)]
    keys = list(zip(*parts)) if info.tuple_key else parts[0]
    values = delta.get_column("v").to_list()
    if info.kind == "merge":
        # A delta sums the epoch's merges: the first one starts from the default.
        default = info.default
        get = store.get
        for key, v in zip(keys, values):
            store[key] = get(key, default) + v
        return
    gone = delta.get_column("_del")
    if not gone.any():
        store.update(zip(keys, values))
        return
    for key, v, deleted in zip(keys, values, gone.to_list()):
        if deleted:
            store.pop(key, None)
        else:
            store[key] = v


#: From how many keys a state is kept as columns instead of a dict (``_Kept``): below it, a
#: commit walks the dict faster than polars joins fold its columns.
COLUMN_KEYS = 20_000


class _Kept:
    """One state's value through the epochs: a dict, as :func:`_apply` folds it, until it
    holds :data:`COLUMN_KEYS` keys; from then on columns ``k0.., v`` (a polars frame) folded
    with each epoch's delta as the dict would be (new keys after the others, in the delta's
    order; a deleted key gone), committed as they are (``StoreColumns``) and made a dict once,
    at the end. A fold that would change a column's type goes back to the dict."""

    def __init__(self, info: Any, start: dict):
        self.info = info
        self.keys = [f"k{i}" for i in range(info.arity)]
        self.store: dict | None = start
        self.frame: pl.DataFrame | None = None
        self.columns_fit = True  # (false once a store would not make columns)
        self._made: tuple = (None, None)  # (frame, its Arrow table): see ``_table``
        self._to_columns()

    def fold(self, delta: pl.DataFrame) -> None:
        if self.frame is not None:
            folded = self._folded(self.frame, delta)
            if folded is not None:
                self.frame = folded
                return
            self.store, self.frame, self.columns_fit = self.final(), None, False
        _apply(self.store, delta, self.info)
        self._to_columns()

    def committed(self) -> dict | StoreColumns:
        """What a commit writes: a copy of the dict (the next fold changes it while the
        commit is written), or the columns as they are (a fold makes new ones)."""
        if self.frame is None:
            return dict(self.store)
        return StoreColumns(self._table(), self.info.arity if self.info.tuple_key else None)

    def final(self) -> dict:
        """The value as the dict the serial engine holds (made once from the columns)."""
        if self.frame is None:
            return self.store
        return store_from_table(self._table(), self.info.arity if self.info.tuple_key else None)

    def _to_columns(self) -> None:
        if not self.columns_fit or self.store is None or len(self.store) < COLUMN_KEYS:
            return
        made = store_columns(self.store)
        if made is None or any(_ARROW.get(t) is None for t in _dtypes(made[0])):
            self.columns_fit = False
            return
        self.frame, self.store = pl.from_arrow(made[0]), None

    def _table(self) -> pa.Table:
        """The columns as Arrow, made once per fold (the last epoch's commit and the final
        dict read the same)."""
        if self._made[0] is not self.frame:
            arrays = [
                self.frame.get_column(name).to_arrow().cast(_ARROW[dtype.base_type()])
                for name, dtype in self.frame.schema.items()
            ]
            self._made = (self.frame, pa.Table.from_arrays(arrays, names=[*self.keys, "v"]))
        return self._made[1]

    def _folded(self, frame: pl.DataFrame, delta: pl.DataFrame) -> pl.DataFrame | None:
        """``frame`` with ``delta`` folded in, or None when that would change a column's type
        (an int column taking floats) or the keys' types differ."""
        keys, merge = self.keys, self.info.kind == "merge"
        change = delta.select(*keys, pl.col("v").alias("_dv"), *([] if merge else ["_del"]))
        try:
            old = frame.join(change, on=keys, how="left", maintain_order="left")
            new = change.join(frame.select(keys), on=keys, how="anti", maintain_order="left")
        except pl.exceptions.PolarsError:
            return None
        if merge:  # a delta sums the epoch's merges: the first starts from the default
            old = old.select(*keys, (pl.col("v") + pl.col("_dv").fill_null(0)).alias("v"))
            new = new.select(*keys, (pl.lit(self.info.default) + pl.col("_dv")).alias("v"))
        else:
            kept = ~pl.col("_del")
            changed = pl.col("_del").is_not_null()
            old = old.filter(~changed | kept).select(
                *keys, pl.when(changed).then(pl.col("_dv")).otherwise(pl.col("v")).alias("v")
            )
            new = new.filter(kept).select(*keys, pl.col("_dv").alias("v"))
        schema = dict(frame.schema)
        if dict(old.schema) != schema or (new.height and dict(new.schema) != schema):
            return None
        return pl.concat([old, new]) if new.height else old


def _dtypes(table: pa.Table) -> list:
    """The polars types a table's columns become."""
    return [t.base_type() for t in pl.from_arrow(table.slice(0, 0)).schema.values()]


_ARROW = {
    pl.Int64: pa.int64(),
    pl.Int32: pa.int64(),
    pl.Float64: pa.float64(),
    pl.Boolean: pa.bool_(),
    pl.String: pa.string(),
    pl.Null: pa.null(),
}
