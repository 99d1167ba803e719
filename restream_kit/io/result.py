"""The result of a replay: output tables, final state and metrics, the same for every engine."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..model.errors import OutputError
from ..runtime.quarantine import ON_ERROR
from ._table_files import TableFiles, Tables, write_table

__all__ = [
    "Result",
    "TIME_COLUMN",
    "with_time",
    "Metrics",
    "build_table",
    "ROW_COLUMNS",
    "state_table",
    "ON_ERROR",
    "QUARANTINE_SCHEMA",
    "QUARANTINE_FILE",
    "quarantine_table",
    "TableFiles",
]

#: Columns every output row starts with, before the emitted fields.
ROW_COLUMNS = ("lsn", "ts", "handler", "seq")


#: One row per handler run that raised and was rolled back, in processing order. ``line``
#: and ``code`` are the deepest line of the program in the traceback; ``fields`` is the
#: event's columns (other than lsn, ts, kind) as JSON; ``traceback`` holds the program's
#: own frames, innermost last, as ``file:line: code`` lines (the same on every engine).
QUARANTINE_SCHEMA = pa.schema(
    [
        ("lsn", pa.int64()),
        ("seq", pa.int64()),
        ("ts", pa.int64()),
        ("kind", pa.string()),
        ("handler", pa.string()),
        ("line", pa.int64()),
        ("code", pa.string()),
        ("error", pa.string()),
        ("fields", pa.string()),
        ("traceback", pa.string()),
    ]
)

#: The file ``Result.write`` puts quarantined events in (a leading _ keeps it apart from
#: output tables, whose names are the program's).
QUARANTINE_FILE = "_quarantine.parquet"


def quarantine_table(rows: Iterable[dict] = ()) -> pa.Table:
    """The quarantine table of ``rows`` (dicts with the columns of ``QUARANTINE_SCHEMA``)."""
    return pa.Table.from_pylist(list(rows), schema=QUARANTINE_SCHEMA)


@dataclass(frozen=True)
class Metrics:
    """What a replay measured. ``realtime_multiple`` is the log's span over the wall time."""

    engine: str
    events: int
    scheduled_events: int
    wall_s: float
    span_ms: int
    rows: dict[str, int] = field(default_factory=dict)
    stages: dict[str, float] = field(default_factory=dict)
    epochs: int = 1
    #: What ran, per stage: "parallel over N partitions ...", "lowered ..." or "sequential ...".
    path: dict[str, str] = field(default_factory=dict)
    #: Per stage of a parallel engine, the events each of its tasks ran (summed over epochs):
    #: how evenly the work spread.
    task_events: dict[str, list[int]] = field(default_factory=dict)

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def realtime_multiple(self) -> float:
        return (self.span_ms / 1000.0) / self.wall_s if self.wall_s > 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["events_per_s"] = self.events_per_s
        out["realtime_multiple"] = self.realtime_multiple
        return out


#: The column ``result[table]`` adds beside ``ts``: the same instant as a UTC datetime.
TIME_COLUMN = "time"


@dataclass(repr=False)
class Result:
    """Output tables (Arrow, in processing order), the final state of every key, metrics.

    ``tables`` holds what the engine produced, identical on every engine; ``result[name]``
    is the table as a polars DataFrame for people: with a ``time`` column (``ts`` as a UTC
    datetime) after ``ts``, and with its columns even when it emitted no row (known from the
    program's ``emit`` calls, ``schemas``).

    A large table a Spark replay wrote as a file (``docs/scale.md``) stays on disk until
    asked for: ``tables`` is then a :class:`~restream_kit.io._table_files.Tables`, whose
    ``tables[name]`` reads the Arrow table from the file, and ``lazy(name)`` scans it.
    """

    tables: dict[str, pa.Table]
    state: dict[str, dict]
    metrics: Metrics
    warnings: list[str] = field(default_factory=list)
    #: Handler runs that raised and were rolled back (``on_error="skip"|"quarantine"``).
    quarantine: pa.Table = field(default_factory=quarantine_table)
    on_error: str = "stop"
    #: The first epoch this replay ran when it resumed a checkpoint (None when it did not).
    resumed_from_epoch: int | None = None
    #: Per table the program can emit, its fields and their Arrow types, read from the
    #: program's ``emit`` calls (``restream_kit.io.emits``); filled in by ``replay``.
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Where the tables were written (``write``), if they were.
    path: str | None = None
    #: Every state write of the run (``replay(..., history=True)``, :mod:`restream_kit.history.recorder`).
    history: Any = None
    #: What a ``replay(..., reuse=RUN)`` took from RUN: ``reused_stages``, ``rerun_stages``,
    #: ``saved_s`` and ``reason`` (why nothing, when nothing was).
    reuse: dict[str, Any] | None = None
    #: The program and the log replayed (filled in by ``replay``; None for a result loaded
    #: from the catalog), so that ``explain`` can replay them again.
    program: Any = field(default=None, compare=False)
    log: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.tables, Tables) and any(
            isinstance(t, TableFiles) for t in self.tables.values()
        ):
            self.tables = Tables(self.tables)

    def _held(self, table: str) -> Any:
        """Table ``table`` as held: an Arrow table, or the file of one (``TableFiles``)."""
        files = self.tables.files(table) if isinstance(self.tables, Tables) else None
        return files if files is not None else self.tables[table]

    def lazy(self, table: str):
        """Output table ``table`` as a polars ``LazyFrame`` with ``time`` beside ``ts``: a
        table held as a file is scanned, not read, until collected (``.head(10).collect()``
        reads what it shows)."""
        files = self.tables.files(table) if isinstance(self.tables, Tables) else None
        if files is None or table not in self.tables:
            return self[table].lazy()
        return with_time(files.scan())

    @property
    def table_names(self) -> list[str]:
        """Every table: those with rows, then those the program emits to that got none."""
        return [*self.tables, *(t for t in self.schemas if t not in self.tables)]

    def __getitem__(self, table: str):
        """Output table ``table`` as a polars DataFrame, with ``time`` beside ``ts``.

        A table the program emits to but that got no row is empty with its columns; any other
        name raises ``KeyError`` naming the tables there are.
        """
        import polars as pl

        if table in self.tables:
            return with_time(pl.from_arrow(self.tables[table]))
        if table in self.schemas:
            fields = {
                "lsn": pa.int64(),
                "ts": pa.int64(),
                "handler": pa.string(),
                "seq": pa.int64(),
            }
            fields.update(self.schemas[table])
            return with_time(pl.from_arrow(pa.schema(list(fields.items())).empty_table()))
        names = ", ".join(repr(t) for t in self.table_names) or "none"
        raise KeyError(f"no output table {table!r}; the tables are: {names}")

    def __contains__(self, table: object) -> bool:
        return table in self.tables or table in self.schemas

    def keys(self) -> list[str]:
        """The table names, as ``dict.keys`` would give them (``list(result)`` too)."""
        return self.table_names

    def __iter__(self):
        return iter(self.table_names)

    @property
    def status(self) -> str:
        """``ok``, or ``ok, N handler runs rolled back`` when ``on_error`` skipped some."""
        n = self.quarantine.num_rows
        return f"ok, {n:,} handler run{'s' if n != 1 else ''} rolled back" if n else "ok"

    def __repr__(self) -> str:
        """A few lines: engine, status, events and time, then each table's rows and columns."""
        m = self.metrics
        lines = [
            f"<Result {m.engine} · {self.status} · {m.events:,} events in {m.wall_s:.2f} s"
            + (f" · {self.path}" if self.path else "")
            + ">"
        ]
        path = getattr(m, "path", None)
        if path:
            lines.append(f"  path: {_short_path(path)}")
        for name in self.table_names:
            table = self._held(name) if name in self.tables else None
            rows = table.num_rows if table is not None else 0
            fields = (
                [c for c in table.column_names if c not in ROW_COLUMNS]
                if table is not None
                else list(self.schemas.get(name, {}))
            )
            shown = ", ".join(fields[:6]) + (", ..." if len(fields) > 6 else "")
            lines.append(f"  {name}: {rows:,} rows" + (f" ({shown})" if shown else ""))
        if not self.table_names:
            lines.append("  no output tables")
        if self.state:
            sizes = ", ".join(f"{k} {len(v):,}" for k, v in list(self.state.items())[:6])
            more = ", ..." if len(self.state) > 6 else ""
            lines.append(f"  state keys: {sizes}{more}")
        if self.warnings:
            lines.append(f"  warnings: {len(self.warnings)} (result.warnings)")
        return "\n".join(lines)

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython's plain-text display
        printer.text(repr(self))

    def write(self, out_dir: str | Path) -> dict[str, str]:
        """Write each table as ``out_dir/<table>.parquet``; return table name -> path."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        written = {}
        for name in self.tables:
            path = out / f"{name}.parquet"
            write_table(self.tables, name, path)
            written[name] = str(path)
        self.path = str(out)
        if self.quarantine.num_rows and self.on_error == "quarantine":
            path = out / QUARANTINE_FILE
            pq.write_table(self.quarantine, path)
            written[QUARANTINE_FILE] = str(path)
        return written

    def summary(self) -> dict[str, Any]:
        """A JSON-able summary: metrics, rows per table, state sizes, warnings."""
        return {
            "metrics": self.metrics.as_dict(),
            "path": dict(self.metrics.path),
            "tables": {name: self._held(name).num_rows for name in self.tables},
            "state": {name: len(values) for name, values in self.state.items()},
            "warnings": list(self.warnings),
            "quarantined": self.quarantine.num_rows,
            "resumed_from_epoch": self.resumed_from_epoch,
            # reused_stages, rerun_stages, saved_s, reused_run, reuse_reason (replay reuse=).
            **(self.reuse or {}),
        }

    def summary_json(self) -> str:
        return json.dumps(self.summary(), default=str)


def with_time(frame: Any) -> Any:
    """``frame`` (polars, eager or lazy) with ``time``, its ``ts`` as a UTC datetime, right after ``ts``.

    Left as it is when it has no ``ts`` or already has a ``time`` (an emitted field wins).
    """
    import polars as pl

    lazy = isinstance(frame, pl.LazyFrame)  # (its names from its schema: nothing read)
    columns = frame.collect_schema().names() if lazy else list(frame.columns)
    if "ts" not in columns or TIME_COLUMN in columns:
        return frame
    time = pl.col("ts").cast(pl.Datetime("ms", "UTC"))
    columns.insert(columns.index("ts") + 1, TIME_COLUMN)
    return frame.with_columns(time.alias(TIME_COLUMN)).select(columns)


def _short_path(path: Any) -> str:
    """``Metrics.path`` (per stage, how it ran) in one line."""
    if isinstance(path, dict):
        return "; ".join(f"{k}: {v}" for k, v in list(path.items())[:4]) + (
            "; ..." if len(path) > 4 else ""
        )
    return str(path)


def build_table(name: str, rows: Iterable[tuple]) -> pa.Table:
    """Make output table ``name`` from rows ``(lsn, ts, handler, seq, fields)``.

    Columns are the row columns, then the fields in order of first appearance. A field whose
    values cannot share one type is an :class:`OutputError` naming the first row that differs.
    """
    rows = list(rows)
    fields: dict[str, None] = {}
    for row in rows:
        for key in row[4]:
            if key not in fields:
                if key in ROW_COLUMNS:
                    raise OutputError(
                        f"table {name!r}: field {key!r} clashes with a column every row has "
                        f"(emitted by handler {row[2]!r} at lsn {row[0]})"
                    )
                fields[key] = None
    columns: dict[str, pa.Array] = {
        "lsn": pa.array([r[0] for r in rows], pa.int64()),
        "ts": pa.array([r[1] for r in rows], pa.int64()),
        "handler": pa.array([r[2] for r in rows], pa.string()),
        "seq": pa.array([r[3] for r in rows], pa.int64()),
    }
    for key in fields:
        values = [r[4].get(key) for r in rows]
        columns[key] = _column(name, key, values, rows)
    return pa.table(columns)


def _column(table: str, key: str, values: list, rows: list[tuple]) -> pa.Array:
    try:
        column = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        column = None
    if column is not None and not (pa.types.is_boolean(column.type) and _has_numbers(values)):
        return column
    first = next(v for v in values if v is not None)
    for row, value in zip(rows, values):
        if value is not None and not _same_kind(first, value):
            raise OutputError(
                f"table {table!r}: field {key!r} is {type(first).__name__} in earlier rows but "
                f"{type(value).__name__} ({value!r}) in the row emitted by handler {row[2]!r} "
                f"at lsn {row[0]}"
            ) from None
    raise OutputError(
        f"table {table!r}: field {key!r} holds values that cannot be stored in a table "
        f"(first: {first!r})"
    ) from None


def _has_numbers(values: list) -> bool:
    return any(not isinstance(v, bool) and v is not None for v in values)


def _same_kind(a: Any, b: Any) -> bool:
    ka, kb = _type_class(a), _type_class(b)
    return ka == kb or {ka, kb} == {"int", "float"}


def _type_class(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return type(value).__name__


def state_table(values: dict) -> pa.Table:
    """One state's final values as a table: ``key`` (or ``key_0``, ``key_1``...) and ``value``."""
    keys = list(values)
    if keys and all(isinstance(k, tuple) for k in keys) and len({len(k) for k in keys}) == 1:
        width = len(keys[0])
        columns = {f"key_{i}": pa.array([k[i] for k in keys]) for i in range(width)}
    else:
        columns = {"key": pa.array(keys)}
    columns["value"] = pa.array(list(values.values()))
    return pa.table(columns)
