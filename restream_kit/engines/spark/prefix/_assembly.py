"""What the prefix path's driver makes of the rounds' rows: each round's rows taken in epoch
order (:class:`Rounds`), then the output tables in processing order, each epoch's rows, and the
final state folded from the deltas, or every epoch committed to a checkpoint
(:func:`assemble`).
"""

from __future__ import annotations

import io
import time
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from ....compiler.lower import Lowered
from ....io.log import Log
from ....io.progress import EpochFinished, EpochStarted
from ....io.result import ROW_COLUMNS, build_table
from ....model.program import Program
from ._columnar import combine_deltas, epoch_of
from ._commits import commit_epochs
from ._epoch_rows import EpochTables, resumed_tables
from ._output_parts import held_tables

__all__ = ["Rounds", "assemble", "final_state", "from_ipc"]


def from_ipc(data: bytes) -> pl.DataFrame:
    """A frame sent as Arrow IPC bytes."""
    return pl.read_ipc(io.BytesIO(data))


class Rounds:
    """What the rounds' tasks sent back, gathered in epoch order: each state's deltas (a
    state's later writes come last), the read columns later rounds use, the history's probes
    and the emitted rows of each emit site, by epoch."""

    def __init__(self, deltas: dict[str, list[pl.DataFrame]]):
        self.deltas = deltas
        self.carried: dict[str, bytes] = {}  # "read:<site>:<epoch>": a read column
        self.probed: dict[int, list] = {}  # slot -> [(epoch, IPC bytes)]
        self.emitted: dict[int, list[tuple[int, pl.DataFrame]]] = {}
        self.written: dict[str, list[str]] = {}  # part files by table (``_output_parts``)

    def take(self, table: pa.Table, bounds: list[tuple[int, int]]) -> None:
        """Take one round's rows (of ``_driver.TASK_SCHEMA``)."""
        for row in sorted(table.to_pylist(), key=lambda row: row["chunk"]):
            if row["what"] == "read":
                self.carried[f"read:{row['name']}:{row['chunk']}"] = row["payload"]
            elif row["what"] == "delta":
                self.deltas.setdefault(row["name"], []).append(from_ipc(row["payload"]))
            elif row["what"] == "probe":
                self.probed.setdefault(int(row["name"]), []).append((row["chunk"], row["payload"]))
            elif row["what"] == "file":
                self.written.setdefault(row["name"], []).append(row["payload"].decode())
            elif row["what"] == "emit":
                self.emitted.setdefault(int(row["name"]), []).extend(
                    _split_rows(from_ipc(row["payload"]), row["chunk"], bounds)
                )


def assemble(
    run: tuple,
    took: Rounds,
    bounds,
    history: Any,
    checkpoint: Any,
    stages: dict,
    notify,
    check_cancel,
) -> tuple[Any, dict[str, pa.Table]]:
    """(the state, the tables) of the replay ``run`` = (lowered program, program, log, epoch,
    start, until, the ``OutputFiles`` of its tasks' part files, the epoch of each chunk) once its rounds are done: the
    history's probes taken, the tables the tasks wrote merged (held as files), every epoch
    committed to ``checkpoint`` (the state is then where it left off), else the final state
    folded and each epoch's rows told to ``notify``; ``stages`` gets the driver's times."""
    low, program, log, epoch, start, until, outputs, owners = run
    assembled = time.perf_counter()
    if history is not None:
        history[0].take_prefix(history[1], took.probed)
    held = held_tables(low, log, outputs, took.written, took.emitted) if took.written else {}
    tables, made = _tables(low, log, took.emitted, bounds)
    made.owners = owners
    if held:  # (in the order of the tables' emit sites, as built in memory)
        tables.update(held)
        order = dict.fromkeys(site.table for site in low.emits)
        tables = {name: tables[name] for name in order if name in tables}
    if checkpoint is not None:
        stages["tables (driver)"] = time.perf_counter() - assembled
        committing = time.perf_counter()
        state, committed = commit_epochs(
            checkpoint, low, program, log, epoch, took.deltas, took.emitted, made, notify,
            check_cancel, start, until,
        )  # fmt: skip
        # (a wave's tables are not the result; a resume that did not read its committed rows
        # has its tables read back from the checkpoint: ``_waves``)
        if start is not None and until is None and start.rows:
            tables = resumed_tables(start, committed)
        stages["state per epoch, committed (driver)"] = time.perf_counter() - committing
    else:
        state = final_state(low, program, took.deltas)
        stages["tables and final state (driver)"] = time.perf_counter() - assembled
        # Every event is done: the epochs' rows, in order, for streaming views.
        for number, (lo, hi) in enumerate(bounds):
            notify(EpochStarted(number, hi - lo))
            notify(EpochFinished(number, hi, 0.0, made.slices.get(number, {}), None))
    return state, tables


def _split_rows(frame: pl.DataFrame, first: int, bounds) -> list[tuple[int, pl.DataFrame]]:
    """A task's emitted rows (with positions ``_o``) as ``(epoch, rows)`` of the epochs from
    ``first`` on: a checkpoint commits each epoch's rows."""
    if (
        not frame.height
        or first + 1 >= len(bounds)
        or frame.get_column("_o").max() < bounds[first][1]
    ):
        return [(first, frame)]
    starts = [lo for lo, _hi in bounds[first:]]
    epochs = epoch_of(frame.get_column("_o"), first, starts)
    parts = frame.with_columns(epochs.alias("_e")).partition_by(
        "_e", maintain_order=True, as_dict=True
    )
    return [(int(e), part.drop("_e")) for (e,), part in parts.items()]


def _tables(low: Lowered, log: Log, emitted, bounds) -> tuple[dict[str, pa.Table], EpochTables]:
    """Output tables in processing order, and each epoch's slice of them (for streaming views
    and a checkpoint's commits)."""
    by_table: dict[str, list] = {}
    for index, parts in sorted(emitted.items()):
        frames = [frame for _chunk, frame in parts if frame.height]
        if frames:
            site = low.emits[index]
            by_table.setdefault(site.table, []).append(
                (site, pl.concat(frames, how="vertical_relaxed"))
            )
    starts = [lo for lo, _hi in bounds]
    tables, made = {}, EpochTables()
    for name, sites in by_table.items():
        built = _columns_table(name, sites, low, log)
        if built is not None:
            made.columnar.add(name)
        table, order = built or _rows_table(name, sites, low, log)
        tables[name] = table
        # Rows are in processing order, so each epoch's rows are one slice.
        cuts = np.searchsorted(order, starts + [len(log)])
        for number, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:])):
            if hi > lo:
                made.slices.setdefault(number, {})[name] = table.slice(lo, hi - lo)
                made.first.setdefault(number, {})[name] = int(order[lo])
    return tables, made


#: Field types a table may take straight from the columns: as ``build_table`` infers them
#: from the Python values of a serial replay.
_PLAIN = {
    pl.Int64: pa.int64(),
    pl.Float64: pa.float64(),
    pl.Boolean: pa.bool_(),
    pl.String: pa.string(),
}


def _columns_table(name: str, sites, low: Lowered, log: Log):
    """Table ``name`` built from the emitted columns (None when a field's type is not plain,
    or differs between emit sites: ``build_table`` then decides, or says what is wrong)."""
    fields: dict[str, Any] = {}
    frames = []
    for number, (site, frame) in enumerate(sites):
        for field, _x in site.fields:
            dtype = frame.schema[f"f_{field}"]
            if (
                field in ROW_COLUMNS
                or dtype not in _PLAIN
                or fields.setdefault(field, dtype) != dtype
            ):
                return None
        frames.append(
            frame.rename({f"f_{f}": f for f, _x in site.fields}).with_columns(
                pl.lit(site.handler, dtype=pl.Int64).alias("_h"),
                pl.lit(site.n, dtype=pl.Int64).alias("_n"),
                pl.lit(number, dtype=pl.Int64).alias("_s"),
            )
        )
    rows = pl.concat(frames, how="diagonal").sort(["_o", "_h", "_n"])
    if any(rows.get_column(f).null_count() == rows.height for f in fields):
        return None  # a field that is None in every row has no type of its own
    # Fields in order of first appearance: a site's rows all hold the same fields.
    first = rows.get_column("_s").unique(maintain_order=True).to_list()
    order_of_fields = dict.fromkeys(f for s in first for f, _x in sites[s][0].fields)
    at = rows.get_column("_o").to_numpy()
    events = log.rows_at(at, ["lsn", "ts"])  # (only these rows: the log is not read whole)
    handlers = pa.array(low.handler_names, pa.string())
    columns = {
        "lsn": events.column("lsn").cast(pa.int64()),
        "ts": events.column("ts").cast(pa.int64()),
        "handler": handlers.take(pa.array(rows.get_column("_h").to_numpy())),
        "seq": pa.array(np.zeros(rows.height, dtype=np.int64)),
    }
    for field in order_of_fields:
        column = rows.get_column(field).to_arrow()
        columns[field] = column.cast(_PLAIN[fields[field]])
    return pa.table(columns), rows.get_column("_o").to_numpy()


def _rows_table(name: str, sites, low: Lowered, log: Log):
    """Table ``name`` built row by row through ``result.build_table``."""
    rows = []
    for site, frame in sites:
        names = [field for field, _x in site.fields]
        values = [frame.get_column(f"f_{n}").to_list() for n in names]
        handler = low.handler_names[site.handler]
        for i, o in enumerate(frame.get_column("_o").to_list()):
            rows.append(
                ((o, site.handler, site.n), handler, {n: v[i] for n, v in zip(names, values)})
            )
    rows.sort(key=lambda r: r[0])
    at = [r[0][0] for r in rows]
    events = log.rows_at(at, ["lsn", "ts"])
    lsns, tss = events.column("lsn").to_pylist(), events.column("ts").to_pylist()
    table = build_table(name, [(l_, t_, r[1], 0, r[2]) for r, l_, t_ in zip(rows, lsns, tss)])
    return table, np.array(at, dtype=np.int64)


def final_state(low: Lowered, program: Program, deltas) -> dict[str, dict]:
    state: dict[str, dict] = {name: {} for name in program.states}
    for name, frames in deltas.items():
        info = low.states[name]
        folded = combine_deltas(frames, info)
        keys = [folded.get_column(f"k{i}").to_list() for i in range(info.arity)]
        values = folded.get_column("v").to_list()
        if info.kind == "merge" and info.default:
            # Deltas sum the merges: a key's value is its default plus them.
            values = [info.default + v for v in values]
        if info.tuple_key:
            state[name] = dict(zip(zip(*keys), values))
        else:
            state[name] = dict(zip(keys[0], values))
    return state
