"""Reading a labels table: the cases that really happened, one or more rows per key.

A labels table has the key column(s) (the ``by`` fields), optionally a time column (when the
case became true or was confirmed: integer milliseconds, ISO-8601 strings or timestamps, read
as the log reads ``ts``) and optionally a class column. Without a class column every row is a
positive; with one, a row is a positive when its class is ``positive`` (when given), else when
it is true (a boolean class) or not null (any other type). A key with several rows is one
case: positive if any of its rows is, at the earliest time of its positive rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from ..io._times import _ts_to_ms
from ..model.errors import LogError, RestreamError

__all__ = ["Labels", "read_labels", "LABEL_TS", "DEFAULT_TIME", "DEFAULT_CLASS"]

#: The column of :attr:`Labels.frame` holding each positive key's label time (ms, or null).
LABEL_TS = "label_ts"
#: The time and class columns a labels table is read with when none is named.
DEFAULT_TIME = "ts"
DEFAULT_CLASS = "class"
#: What :meth:`Labels.to_dict` says after the source and the key fields, in its order.
_SAID = ("rows", "positives", "negatives", "time_column", "class_column", "positive")


@dataclass(frozen=True)
class Labels:
    """The positive keys of a labels table: ``frame`` has the ``by`` fields and ``label_ts``
    (null where the table gives no time), one row per key."""

    by: tuple[str, ...]
    frame: pl.DataFrame = field(repr=False)
    source: str
    #: The time column read (None: the labels have no time, and no time to detect).
    time_column: str | None
    class_column: str | None
    positive: Any
    #: Rows of the table, and distinct keys that were not positives (confirmed negatives).
    rows: int = 0
    negatives: int = 0

    @property
    def positives(self) -> int:
        return self.frame.height

    @property
    def timed(self) -> bool:
        return self.time_column is not None

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "by": list(self.by), **{k: getattr(self, k) for k in _SAID}}


def read_labels(
    labels: Any,
    by: tuple[str, ...],
    *,
    ts: str | None = None,
    class_column: str | None = None,
    positive: Any = None,
) -> Labels:
    """``labels`` (a Parquet or CSV path, a packaged sample's name, or a polars, pandas or
    pyarrow table) as :class:`Labels` keyed by ``by``.

    ``ts`` names the time column (default ``ts`` when there is one), ``class_column`` the class
    column (default ``class`` when there is one). Raises
    :class:`~restream_kit.model.errors.RestreamError` naming the file, column and row of bad
    input.
    """
    if isinstance(labels, Labels):
        if labels.by != by:
            raise RestreamError(
                f"labels {labels.source} were read by {', '.join(labels.by)}, not by "
                f"{', '.join(by)}: read them again with these fields"
            )
        return labels
    table, source = _table(labels)
    columns = table.column_names
    for name in by:
        if name not in columns:
            raise RestreamError(
                f"labels {source}: no key column {name!r} (its columns: {', '.join(columns)}); "
                "the labels need a column named like each --by field"
            )
    for name, what in ((ts, "time"), (class_column, "class")):
        if name is not None and name not in columns:
            raise RestreamError(
                f"labels {source}: no {what} column {name!r} (its columns: {', '.join(columns)})"
            )
    ts = ts if ts is not None else (DEFAULT_TIME if DEFAULT_TIME in columns else None)
    cls = class_column or (DEFAULT_CLASS if DEFAULT_CLASS in columns else None)
    frame = pl.from_arrow(table.select(list(by))) if table.num_rows else _empty(table, by)
    assert isinstance(frame, pl.DataFrame)
    for name in by:
        nulls = frame.get_column(name).is_null()
        if nulls.any():
            raise RestreamError(
                f"labels {source}, column {name!r}, row {int(nulls.arg_max())}: the key is null"
            )
    times = _times(table, ts, source) if ts else pl.Series(LABEL_TS, [None] * len(frame), pl.Int64)
    frame = frame.with_columns(times, _positive(table, cls, positive, source).alias("_positive"))
    keys = frame.group_by(list(by), maintain_order=True).agg(
        pl.col("_positive").any(),
        pl.col(LABEL_TS).filter(pl.col("_positive")).min(),
    )
    positives = keys.filter(pl.col("_positive")).drop("_positive")
    return Labels(
        by=by,
        frame=positives,
        source=source,
        time_column=ts,
        class_column=cls,
        positive=positive,
        rows=table.num_rows,
        negatives=keys.height - positives.height,
    )


def _table(labels: Any) -> tuple[pa.Table, str]:
    if isinstance(labels, pa.Table):
        return labels, "(table)"
    if isinstance(labels, pl.DataFrame):
        return labels.to_arrow(), "(DataFrame)"
    if isinstance(labels, pl.LazyFrame):
        return labels.collect().to_arrow(), "(LazyFrame)"
    if hasattr(labels, "to_arrow") and not isinstance(labels, (str, Path)):
        return labels.to_arrow(), "(table)"
    if type(labels).__module__.startswith("pandas"):
        return pa.Table.from_pandas(labels, preserve_index=False), "(DataFrame)"
    if not isinstance(labels, (str, Path)):
        raise RestreamError(
            f"labels: expected a Parquet or CSV path or a DataFrame, not {type(labels).__name__}"
        )
    return _read(Path(labels)), str(labels)


def _read(path: Path) -> pa.Table:
    if not path.exists():
        from ..io.samples import SAMPLE_LABELS, sample_data

        if str(path) not in SAMPLE_LABELS:
            raise RestreamError(f"labels {path}: no such file")
        path = sample_data(str(path))
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".tsv", ".txt"):
            options = pa_csv.ParseOptions(delimiter="\t" if suffix == ".tsv" else ",")
            return pa_csv.read_csv(path, parse_options=options)
        if path.is_dir() or suffix in (".parquet", ".pq", ""):
            return pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise RestreamError(f"labels {path}: cannot read: {str(exc).splitlines()[0]}") from None
    raise RestreamError(f"labels {path}: unknown format (use .parquet or .csv)")


def _empty(table: pa.Table, by: tuple[str, ...]) -> pl.DataFrame:
    return pl.from_arrow(table.select(list(by)).schema.empty_table())  # type: ignore[return-value]


def _times(table: pa.Table, column: str, source: str) -> pl.Series:
    """The time column in milliseconds, parsed as the log parses ``ts``; nulls stay null."""
    col = table.column(column)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return _text_times(pl.Series(col.combine_chunks()), column, source)
    valid = pc.is_valid(col)
    if col.null_count == len(col):
        return pl.Series(LABEL_TS, [None] * len(col), pl.Int64)
    # A null takes the first time's value to be parsed, and is null again after.
    filled = pc.fill_null(col, col.filter(valid)[0]) if col.null_count else col
    try:
        ms = _ts_to_ms(filled, source)
    except LogError as exc:
        message = str(exc).split(": ", 1)[-1]
        row = "" if exc.row is None else f", row {exc.row}"
        raise RestreamError(f"labels {source}, column {column!r}{row}: {message}") from None
    ms = pc.if_else(valid, ms, pa.scalar(None, pa.int64()))
    return pl.Series(LABEL_TS, ms.combine_chunks() if isinstance(ms, pa.ChunkedArray) else ms)


def _text_times(text: pl.Series, column: str, source: str) -> pl.Series:
    """Integer milliseconds or ISO-8601 times (``Z`` or an offset: UTC) as text."""
    ms = text.cast(pl.Int64, strict=False)
    when = text.str.to_datetime(time_unit="ms", time_zone="UTC", strict=False)
    out = ms.fill_null(when.dt.epoch("ms"))
    bad = out.is_null() & text.is_not_null()
    if bad.any():
        row = int(bad.arg_max())
        raise RestreamError(
            f"labels {source}, column {column!r}, row {row}: {text[row]!r} is neither integer "
            "milliseconds nor an ISO-8601 time"
        )
    return out.alias(LABEL_TS)


def _positive(table: pa.Table, column: str | None, positive: Any, source: str) -> pl.Expr:
    if column is None:
        if positive is not None:
            raise RestreamError(
                f"labels {source}: positive={positive!r} needs a class column; name it with "
                "class_column= (--class COLUMN)"
            )
        return pl.lit(True)
    values = pl.Series(table.column(column).combine_chunks())
    if positive is not None:
        if values.dtype == pl.String or isinstance(positive, str):
            hit = values.cast(pl.String) == str(positive)
        else:
            hit = values == positive
        return pl.lit(hit.fill_null(False))
    if values.dtype == pl.Boolean:
        return pl.lit(values.fill_null(False))
    return pl.lit(values.is_not_null())
