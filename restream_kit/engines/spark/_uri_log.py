"""A log given as a URI (``hdfs://``, ``s3a://``, ``file://``...), read by Spark's own reader.

The kernel never reads such a log: the URI goes to ``spark.read.parquet`` (a file or a
directory of files) or ``spark.read.csv`` untouched, and Spark builds the canonical log exactly
as :class:`restream_kit.io.log.Log` builds it from a local file:

- ``ts`` to int64 milliseconds (integers, timestamps, dates, whole floats), ``kind`` filled
  with the default kind name, the other columns as they are; the column the source's ``ts=``
  names becomes ``ts``, and its ``kind=`` is every event's kind;
- without an ``lsn`` column, the events sorted by ``ts`` and, among equal times, by position in
  the input, and numbered from 0 in that order. The position is explicit, never Spark's task
  order: (file path, start of the file split, row within the split), so a directory of files
  reads in path order, as pyarrow reads it;
- with an ``lsn`` column, sorted by (``ts``, ``lsn``), the ``lsn`` values unique.

:func:`describe` reads the log once per session (the canonical rows stay in Spark, checkpointed
on the executors) and sets :attr:`Log.summary`: its size, kinds, times, schema and which columns
each kind fills, so the program's checks and the replay's plan need no row in the kernel.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa

from ...compiler.lower import ColumnFacts
from ...io._ordered import ROW_GROUP, OrderedCopy
from ...io.log import DEFAULT_KIND, RESERVED, Log, LogSummary, own_columns, private_dir
from ...model.errors import LogError, RestreamError
from ...planner.checks import EVENT_ATTRIBUTES
from ._events import _SAFE, rowless_events

__all__ = ["describe", "uri_frame", "uri_events", "copy_facts"]

_BASES: dict[tuple, Any] = {}  # (session, fingerprint) -> the canonical DataFrame
_FACTS: dict[str, dict] = {}  # fingerprint -> its columns' ColumnFacts (a local copy's)
#: Rows per row group of Spark's ordered copy, about: what a task or the driver reads at once.
_GROUP_BYTES = 16 << 20


def describe(session: Any, log: Log) -> LogSummary:
    """Read ``log.uri`` with Spark (once per session and log) and set ``log.summary``.

    On a local master the canonical log is written once, by the executors, as an ordered copy
    in the log cache (``<fingerprint>.spark/``, see :func:`_copy_dir`): later replays, in
    this process or another, read it with no sort, and the log adopts it (the prefix path's
    tasks and the driver's few look-ups read it a row group at a time)."""
    key = (id(session), log.fingerprint)
    if log.summary is not None and key in _BASES:
        return log.summary
    target = _copy_dir(session, log)
    copy = _kept(target)
    if copy is None:
        base = _read(session, log)
        if target is None:
            log.summary = _summarize(base)[0]
        else:
            copy = _write_copy(base, target)
    if copy is not None:
        summary = copy.summary()
        log.adopt(copy, summary)
        base = _read_copy(session, copy, summary)
    while len(_BASES) >= 2:
        _BASES.pop(next(iter(_BASES)))
    _BASES[key] = base
    return log.summary


def uri_frame(session: Any, log: Log) -> Any:
    """The canonical log's DataFrame (``lsn``, ``ts``, ``kind``, the other columns)."""
    describe(session, log)
    return _BASES[(id(session), log.fingerprint)]


def copy_facts(log: Log) -> dict | None:
    """What lowering needs of the log's columns (``lower.ColumnFacts``), when Spark wrote an
    ordered copy of it on this machine; None otherwise."""
    copy = log._copy if log.uri is not None else None  # noqa: SLF001 - adopted by describe
    if copy is None:
        return None
    if log.fingerprint not in _FACTS:
        data = json.loads(copy.manifest.read_text()).get("facts")
        if data is None:
            return None
        schema = log.summary.schema
        _FACTS[log.fingerprint] = {
            name: ColumnFacts(schema.field(name).type, bool(n), (lo, hi))
            for name, (n, lo, hi) in data.items()
        }
    return _FACTS[log.fingerprint]


def _copy_dir(session: Any, log: Log) -> Path | None:
    """Where Spark writes the log's ordered copy: the log cache, on a local master (whose
    executors share this machine's disk); None on a cluster (the canonical rows are then
    checkpointed on the executors, once per session)."""
    try:
        local = session.sparkContext.master.startswith("local")
    except Exception:  # noqa: BLE001 - Spark Connect: the server's executors are elsewhere
        local = False
    return log.cache_dir / f"{log.fingerprint}.spark" if local else None


def _kept(target: Path | None) -> OrderedCopy | None:
    """The ordered copy at ``target`` when a replay wrote it whole (its manifest is the last
    thing written), else None."""
    if target is None or not (target / "_manifest.json").exists():
        return None
    try:
        return OrderedCopy(target)
    except Exception:  # noqa: BLE001 - damaged: written again
        return None


def _write_copy(base: Any, target: Path) -> OrderedCopy:
    """Write the canonical frame ``base`` (in log order, partition after partition) as
    Parquet part files in ``target``, with the manifest, whole or not at all."""
    private_dir(target.parent)
    if target.exists() and not (target / "_manifest.json").exists():
        shutil.rmtree(target, ignore_errors=True)  # left unfinished, or damaged
    tmp = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        # Row groups of at most ROW_GROUP rows, as the DuckDB copy's: the prefix path's
        # epochs and the driver's look-ups read whole groups (Spark's own made 1.15M rows).
        (
            base.write.option("parquet.block.size", _GROUP_BYTES)
            .option("parquet.block.row.count.limit", ROW_GROUP)
            .parquet(str(tmp))
        )
        summary, facts = _summarize(base)
        manifest = {**summary.to_json(), "facts": facts}
        (tmp / "_manifest.json").write_text(json.dumps(manifest))
        try:
            os.replace(tmp, target)
        except OSError:  # another replay wrote it first: the same rows
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return OrderedCopy(target)


def _read_copy(session: Any, copy: OrderedCopy, summary: LogSummary) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    # The schema given, Spark reads no footer in a job of its own to find it.
    return session.read.schema(from_arrow_schema(summary.schema)).parquet(str(copy.path))


def uri_events(log: Log) -> Any:
    """The engine's view of the log's columns (no rows: those stay in Spark)."""
    schema = log.summary.schema
    for f in schema:
        if not any(check(f.type) for check in _SAFE):
            raise LogError(
                f"column {f.name} has type {f.type}, which a log read by Spark from a URI "
                "cannot carry yet (use numbers, strings, booleans or binary)",
                path=log.uri,
                column=f.name,
            )
    return rowless_events(schema)


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _read(session: Any, log: Log) -> Any:
    """The canonical log's DataFrame of ``log.uri``, in log order (see the module docstring)."""
    from pyspark.sql import functions as F

    uri = log.uri
    source = log.sources[0]
    raw, fields, csv = _scan(session, uri)
    # The time column named by ts= becomes ts, as Log makes it; the same checks and errors.
    own_columns(_empty_like(raw), source)
    renamed = source.ts is not None and source.ts != "ts"
    if renamed:
        fields = {("ts" if name == source.ts else name): typ for name, typ in fields.items()}
    # The position in the input, made explicit: Spark's task order is not the file order.
    df = raw.select(
        "*",
        F.col("_metadata.file_path").alias("_rs_f"),
        F.col("_metadata.file_block_start").alias("_rs_b"),
        F.monotonically_increasing_id().alias("_rs_m"),
    )
    if renamed:  # after the file's metadata is read: that needs the scan's own columns
        df = df.withColumnRenamed(source.ts, "ts")
    ts = _ts(fields["ts"], uri, df)
    kind_name = source.name or DEFAULT_KIND
    if source.kind is not None:  # kind=: one kind for every event (own_columns checked it)
        kind = F.lit(source.kind)
    elif "kind" in fields:
        kind = F.coalesce(F.col("kind").cast("string"), F.lit(kind_name))
    else:
        kind = F.lit(kind_name)
    rest = _other_columns(fields, csv)
    if "lsn" in fields:
        return _with_lsn(df, fields, uri, ts, kind, rest)
    return _numbered(df, fields, ts, kind, rest)


def _scan(session: Any, uri: str) -> tuple[Any, dict, bool]:
    """Spark's scan of ``uri`` (Parquet, or CSV with a header), its columns' Spark types, and
    whether it is CSV; a :class:`LogError` naming the URI when Spark cannot read it."""
    suffix = PurePosixPath(urlparse(uri).path).suffix.lower()
    csv = suffix in (".csv", ".tsv", ".txt")
    try:
        if csv:
            sep = "\t" if suffix == ".tsv" else ","
            raw = session.read.options(header=True, inferSchema=True, sep=sep).csv(uri)
        elif suffix in (".parquet", ".pq", ""):
            raw = session.read.parquet(uri)
        else:
            raise LogError("unknown log format (use .parquet or .csv)", path=uri)
        fields = {f.name: f.dataType for f in raw.schema.fields}
    except LogError:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. PATH_NOT_FOUND: one line, naming the URI
        raise LogError(f"Spark cannot read the log: {_first_line(exc)}", path=uri) from None
    return raw, fields, csv


def _other_columns(fields: dict, csv: bool) -> list:
    """The log's own columns but the reserved ones, as they are (a CSV's small integers as
    int64, as pyarrow reads them)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as ST

    rest = []
    for name, typ in fields.items():
        if name in RESERVED:
            continue
        col = F.col(_q(name))
        # pyarrow reads a CSV's integers as int64: so must Spark.
        if csv and isinstance(typ, (ST.IntegerType, ST.ShortType, ST.ByteType)):
            col = col.cast("bigint")
        rest.append(col.alias(name))
    return rest


def _with_lsn(df: Any, fields: dict, uri: str, ts: Any, kind: Any, rest: list) -> Any:
    """A log with its own ``lsn`` column: sorted by (``ts``, ``lsn``), its ``lsn`` checked
    (integers, none null, none twice)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as ST

    if not isinstance(fields["lsn"], ST.IntegralType):
        raise LogError(
            f"lsn has type {fields['lsn'].simpleString()}; it must be an integer",
            path=uri,
            column="lsn",
        )
    df = df.select(
        F.col("lsn").cast("bigint").alias("lsn"), ts.alias("ts"), kind.alias("kind"), *rest
    )
    nulls, rows, distinct = df.agg(
        F.count(F.lit(1)) - F.count("lsn"), F.count(F.lit(1)), F.countDistinct("lsn")
    ).first()
    if nulls:
        raise LogError("lsn is null", path=uri, column="lsn")
    if distinct != rows:
        raise LogError("an lsn is duplicated", path=uri, column="lsn")
    return df.orderBy("ts", "lsn").localCheckpoint(eager=True)


def _numbered(df: Any, fields: dict, ts: Any, kind: Any, rest: list) -> Any:
    """A log without an ``lsn``: sorted by time and position in the input, and numbered from 0
    in that order."""
    from pyspark.sql import functions as F

    ordered = (
        df.select(ts.alias("ts"), kind.alias("kind"), *rest, "_rs_f", "_rs_b", "_rs_m")
        .orderBy("ts", "_rs_f", "_rs_b", "_rs_m")
        .select(
            "*",
            F.spark_partition_id().alias("_rs_p"),
            F.monotonically_increasing_id().alias("_rs_n"),
        )
        .localCheckpoint(eager=True)
    )
    # A range-partitioned sort: partition i holds the i-th run of the order, so an event's
    # lsn is the rows of the partitions before its own plus its row number within it.
    counts = dict(ordered.groupBy("_rs_p").count().collect())
    offsets, total = {}, 0
    for part in sorted(counts):
        offsets[part] = total
        total += counts[part]
    if offsets:
        start = F.element_at(
            F.map_from_arrays(
                F.array(*[F.lit(p) for p in offsets]),
                F.array(*[F.lit(o).cast("bigint") for o in offsets.values()]),
            ),
            F.col("_rs_p"),
        )
    else:
        start = F.lit(0).cast("bigint")
    within = F.col("_rs_n") - F.shiftleft(F.col("_rs_p").cast("bigint"), 33)
    names = [n for n in fields if n not in RESERVED]
    return ordered.select((start + within).alias("lsn"), "ts", "kind", *[_q(n) for n in names])


def _empty_like(df: Any) -> pa.Table:
    """An empty Arrow table with ``df``'s columns (their types where Arrow has them)."""
    from pyspark.sql.pandas.types import to_arrow_type

    fields = []
    for f in df.schema.fields:
        try:
            fields.append(pa.field(f.name, to_arrow_type(f.dataType, timezone="UTC")))
        except Exception:  # noqa: BLE001 - a type Arrow cannot name: only the name matters here
            fields.append(pa.field(f.name, pa.null()))
    return pa.schema(fields).empty_table()


def _ts(typ: Any, uri: str, df: Any) -> Any:
    """``ts`` as int64 milliseconds, as :func:`restream_kit.io.log._ts_to_ms` makes it."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as ST

    c = F.col("ts")
    if isinstance(typ, ST.IntegralType):
        out = c.cast("bigint")
    elif isinstance(typ, ST.TimestampType):
        out = F.unix_millis(c)
    elif type(typ).__name__ == "TimestampNTZType":  # wall times, read as UTC (as pyarrow does)
        out = F.expr("timestampdiff(MILLISECOND, TIMESTAMP_NTZ'1970-01-01 00:00:00', ts)")
    elif isinstance(typ, ST.DateType):
        out = F.unix_date(c).cast("bigint") * F.lit(86_400_000)
    elif isinstance(typ, (ST.FloatType, ST.DoubleType)):
        fractions = df.where(c.isNotNull() & (c != F.floor(c))).limit(1).count()
        if fractions:
            raise LogError("ts must be whole milliseconds, found a fraction", path=uri, column="ts")
        out = c.cast("bigint")
    else:
        raise LogError(
            f"ts has type {typ.simpleString()}, which a log read by Spark from a URI cannot "
            "order as time (use integer milliseconds, timestamps or dates)",
            path=uri,
            column="ts",
        )
    if df.where(c.isNull()).limit(1).count():
        raise LogError("ts is null", path=uri, column="ts")
    return out


def _summarize(base: Any) -> tuple[LogSummary, dict]:
    """The log's summary, and per column [has a null, min, max] (min and max of integer
    columns, else 0): what lowering needs (``copy_facts``). One Spark job."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as ST
    from pyspark.sql.pandas.types import to_arrow_schema

    others = [c for c in base.columns if c not in EVENT_ATTRIBUTES]
    ints = [
        (i, f.name)
        for i, f in enumerate(base.schema.fields)
        if isinstance(f.dataType, ST.IntegralType)
    ]
    rows = (
        base.groupBy("kind")
        .agg(
            F.count(F.lit(1)).alias("_rs_n"),
            F.min(F.struct("ts", "lsn")).alias("_rs_first"),
            F.min("ts").alias("_rs_lo"),
            F.max("ts").alias("_rs_hi"),
            *[F.count(_q(c)).alias(f"_rs_c{i}") for i, c in enumerate(others)],
            *[F.count(_q(c)).alias(f"_rs_v{i}") for i, c in enumerate(base.columns)],
            *[F.min(_q(c)).alias(f"_rs_min{i}") for i, c in ints],
            *[F.max(_q(c)).alias(f"_rs_max{i}") for i, c in ints],
        )
        .collect()
    )
    rows.sort(key=lambda r: (r["_rs_first"]["ts"], r["_rs_first"]["lsn"]))
    try:
        schema = to_arrow_schema(base.schema)
    except Exception as exc:  # noqa: BLE001 - a Spark type Arrow has no name for
        raise RestreamError(f"a log read by Spark has a column Arrow cannot hold: {exc}") from None
    total = sum(r["_rs_n"] for r in rows)
    facts = {}
    for i, c in enumerate(base.columns):
        lo = hi = 0
        if any(i == j for j, _c in ints):
            los = [r[f"_rs_min{i}"] for r in rows if r[f"_rs_min{i}"] is not None]
            his = [r[f"_rs_max{i}"] for r in rows if r[f"_rs_max{i}"] is not None]
            lo, hi = min(los, default=0), max(his, default=0)
        facts[c] = [total > sum(r[f"_rs_v{i}"] for r in rows), lo, hi]
    summary = LogSummary(
        rows=total,
        kinds=tuple(r["kind"] for r in rows),
        counts={r["kind"]: r["_rs_n"] for r in rows},
        first_ts=min((r["_rs_lo"] for r in rows), default=None),
        last_ts=max((r["_rs_hi"] for r in rows), default=None),
        schema=schema,
        kind_fields={
            r["kind"]: frozenset(c for i, c in enumerate(others) if r[f"_rs_c{i}"]) for r in rows
        },
    )
    return summary, facts
