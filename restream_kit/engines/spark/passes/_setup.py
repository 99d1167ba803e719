"""What every pass job of a replay shares: the log as a DataFrame, with the partition value of
every pass computed once (in Spark SQL for plain columns, in Python otherwise), the columns
that travel, and the schema of the passes' output (wider when the passes forward events)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ....io.log import Log, scratch_parquet
from ....model.program import Program
from .._keys import KeysSpec, KeysTask
from .._program_ref import ProgramRef
from . import _rows as W
from ._plan import BY_KEY, ORDER, SINGLE, PassPlan, forwards
from ._window_shapes import closes_once, folded_counts

__all__ = [
    "Setup",
    "prepare",
    "arranged",
    "unpacked",
    "unquoted",
    "PackTask",
    "kinds_sql",
    "quoted",
    "raw_key",
    "classic",
    "local_master",
    "replay_dir",
]


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def unquoted(name: str) -> str:
    """A column name as :func:`quoted` or ``raw_key`` give it, without the quotes."""
    if name.startswith("`") and name.endswith("`"):
        return name[1:-1].replace("``", "`")
    return name


def kinds_sql(kinds: tuple[str, ...]) -> str:
    return ", ".join("'" + k.replace("\\", "\\\\").replace("'", "\\'") + "'" for k in kinds)


@dataclass
class Setup:
    """What every pass job of a replay shares: the log's DataFrame with the partition value
    of every pass, the columns that travel, and the output schema."""

    rep: Any
    pp: PassPlan
    program: Program
    log: Log
    events: Any
    session: Any
    df: Any
    log_kinds: dict[int, tuple[str, ...]]
    partitions: int
    columns: tuple[str, ...]
    slots: int
    ref: ProgramRef
    ddl: str
    started: float
    persisted: list = field(default_factory=list)
    wide: Any = None  # the passes' output schema when they forward events (Arrow)
    python_keys: frozenset = frozenset()  # partition columns computed in Python (KeysTask)
    forward_pks: tuple = ()  # the partition values forwarded events carry (``_forwards``)
    closes_once: frozenset = frozenset()  # see ``passes._window_shapes.closes_once``
    folds: frozenset = frozenset()  # see ``passes._window_shapes.folded_counts``
    zips: dict = field(
        default_factory=dict
    )  # zipped pass -> its partition columns (``passes._zipped``)
    spread: dict = field(default_factory=dict)  # pass with copies -> a value per partition
    # Passes with copies split into ranges of the log: where ranges 1, 2, ... start
    ranges: dict = field(default_factory=dict)
    # Passes whose events the driver arranges (``passes._local_arrangement``): pass -> its columns;
    # and the replay's own directory for the values they send each other.
    local: dict = field(default_factory=dict)
    values_dir: str | None = None
    # A wave's run (``_waves``): the lsn of its last event; no pass reads an event after it.
    until: int | None = None
    outputs: Any = None  # where tasks write large output tables (``passes._output_files``)


def wave_end(setup: Setup, lsn: int) -> None:
    """Run ``setup``'s passes over the log's events up to the one numbered ``lsn`` only: the
    log's frame is cut there, and the driver's arrangement is read up to it
    (``passes._local_arrangement.local_batches``)."""
    setup.until = lsn
    if setup.df is not None:
        setup.df = setup.df.where(f"lsn <= {int(lsn)}")


def prepare(
    rep: Any, pp: PassPlan, started: float, events: Any, start: dict | None = None
) -> Setup:
    """The log's DataFrame (kept for the next replay of the same log in this session), with
    every pass's partition value, and what the pass jobs share; ``start`` the state a resume
    or a ``start_from`` starts from (``passes._epochs._Begun.state``), if any."""
    from .._events import log_events
    from .._keys import jvm_key

    program: Program = rep.program
    log: Log = rep.log
    session = rep.session
    if events is None and log.uri is not None:  # read by Spark, never here: see _uri_log
        from .._uri_log import uri_events

        events = uri_events(log)
    # A log with an ordered copy on this disk: no row here, the tasks read the copy.
    events = events or log_events(log, local_master(session))
    passes = pp.passes
    # The kinds each pass takes from the log: a kind only ever scheduled costs no log scan.
    present = set(log.kinds)
    log_kinds = {p.index: tuple(k for k in p.event_kinds if k in present) for p in passes}
    local = _arranged_locally(rep, pp, events, log_kinds, start)
    # Passes whose events the driver arranges read no frame of the log.
    df = None if local else _log_frame(session, log, events)
    # Keys the driver deals into balanced partitions need no more partitions than cores;
    # a hash partitioning has twice as many, to even out where its keys land.
    partitions = max(1, int(rep.options.get("partitions") or rep.cores * (1 if local else 2)))
    ranges = {}
    if df is not None and not (start is not None and start["scheduled"]):
        first = rep.begun.done if start is not None else 0  # (the events before the start)
        ranges = copy_ranges(session, pp, events, first, partitions, log)
    persisted = []
    python_keys = []
    sql = []
    ref = ProgramRef.of(program)
    for p in passes if df is not None else ():
        col = f"_rs_pk{p.index}"
        if p.index in ranges:
            sql.append(f"{ranges[p.index][0]} AS {col}")
        elif p.partition == ORDER:
            sql.append(f"concat('i', CAST(_rs_o AS STRING), ';') AS {col}")
        elif p.partition == SINGLE:
            sql.append(f"'N' AS {col}")
        elif p.partition == BY_KEY or p.lookup:
            continue  # (a looked-up key: its events come packed by partition, ``passes._lookups``)
        elif not log_kinds[p.index]:
            if any(q.reader == p.index for other in passes for q in other.serves):
                sql.append(f"CAST(NULL AS STRING) AS {col}")  # no log event reads there
            continue
        else:
            expr = jvm_key(p.partition, events)
            if expr is None:
                python_keys.append((col, p.partition, log_kinds[p.index]))
            else:
                sql.append(f"{expr} AS {col}")
    if python_keys:
        from pyspark.sql.types import StringType, StructField, StructType

        spec = KeysSpec(ref, events.columns, events.pickled, tuple(python_keys), tuple(df.columns))
        schema = StructType(
            list(df.schema.fields) + [StructField(c, StringType(), True) for c, _, _ in python_keys]
        )
        df = df.mapInArrow(KeysTask(spec), schema).persist()
        persisted.append(df)
    if sql:
        df = df.selectExpr("*", *sql)
    slots = sum(len(p.serves) for p in passes)
    out_schema = W.OUT_SCHEMA(slots)
    # Only the columns the program can read travel (all of them for quarantine rows).
    columns = events.columns if rep.on_error != "stop" else _used_columns(program, events.columns)
    wide = None
    pks: list[str] = []
    if forwards(pp) and (start is None or local):
        # The events travel from pass to pass with the probe values they pick up: every
        # pass's output has room for them (their columns and their partition values).
        # Partition values travel only for passes partitioned by more than plain columns
        # (the others partition by the event's own columns).
        plain_keyed = {f"_rs_pk{p.index}" for p in passes if raw_key(p.partition, events)}
        pks = (
            [c for c in df.columns if c.startswith("_rs_pk") and c not in plain_keyed]
            if df is not None
            else []
        )
        extra = [pa.field(c, events.types[c]) for c in columns]
        extra += [pa.field(c, pa.string()) for c in pks]
        out_schema = wide = pa.schema([*out_schema, *extra])
    zips: dict[int, list[str]] = {}
    if wide is not None:
        from ._zipped import PART, zipped_passes

        def by_of(p: Any) -> list[str] | None:
            if p.partition in (ORDER, SINGLE, BY_KEY) or p.lookup:
                return None  # (a looked-up key: no event's partition is known before)
            return raw_key(p.partition, events) or [f"_rs_pk{p.index}"]

        zips = zipped_passes(session, pp, log_kinds, by_of)
        if zips and df is not None:
            # Each event's partition in every zipped pass, as Spark's repartition puts it.
            df = df.selectExpr(
                "*",
                *[
                    f"pmod(hash({', '.join(by)}), {partitions}) AS {PART.format(j)}"
                    for j, by in zips.items()
                ],
            )
    return Setup(
        rep=rep,
        pp=pp,
        program=program,
        log=log,
        events=events,
        session=session,
        df=df,
        log_kinds=log_kinds,
        partitions=partitions,
        columns=columns,
        slots=slots,
        ref=ref,
        ddl=", ".join(f"{quoted(f.name)} {_ddl_type(f.type)}" for f in out_schema),
        started=started,
        persisted=persisted,
        wide=wide,
        python_keys=frozenset(c for c, _, _ in python_keys),
        forward_pks=tuple(pks) if wide is not None else (),
        closes_once=closes_once(program),
        folds=folded_counts(program),
        zips=zips,
        local=local,
        values_dir=replay_dir() if local and (zips or any(p.lookup for p in passes)) else None,
        spread={
            p.index: ("N",) if p.partition == SINGLE else spread_values(session, partitions)
            for p in passes
            if p.copies or p.lookup
        },
        ranges={i: bounds for i, (_sql, bounds) in ranges.items()},
    )


def copy_ranges(
    session: Any, pp: PassPlan, events: Any, first: int, n: int, log: Log | None = None
) -> dict[int, tuple[str, tuple[bytes, ...]]]:
    """The passes holding copies that run by ranges of the log (``passes._copies``), each with the
    SQL of its events' partition values and the positions where its ranges 1, 2, ... start.

    A pass by log order that runs log events only (no stage schedules events, and a start
    state has none waiting: the caller says) holding copies: its ``n`` partitions take
    contiguous, equal ranges of the events from row ``first`` (the first after a start), so
    that each needs the copied state only as of its range's start and the versions within
    it. The range ends are read from the events' table, or else from the log's ordered copy
    (``log``); a log with neither (read by Spark from a URI on a cluster) keeps the events
    spread by hash, each partition with every version."""
    table = getattr(events, "table", None)
    held = table is not None and table.num_rows > 0
    if n < 2 or pp.schedules or not (held or (log is not None and log.copied)):
        return {}
    passes = [p for p in pp.passes if p.copies and p.partition == ORDER]
    if not passes:
        return {}
    total = table.num_rows if held else len(log)
    if total - first < n:
        return {}
    rows = [first + (r * (total - first) + n - 1) // n for r in range(1, n)]
    at = table.select(["lsn", "ts"]).take(rows) if held else log.rows_at(rows, ["lsn", "ts"])
    lsn, ts = at.column("lsn").to_pylist(), at.column("ts").to_pylist()
    bounds = tuple(W.position_bytes((int(t), 2, int(o), b"")) for t, o in zip(ts, lsn))
    values = spread_values(session, n)
    cases = " ".join(f"WHEN _rs_o < {int(o)} THEN '{v}'" for o, v in zip(lsn, values))
    sql = f"CASE {cases} ELSE '{values[-1]}' END"
    return {p.index: (sql, bounds) for p in passes}


_SPREAD: dict[tuple, tuple[str, ...]] = {}


def spread_values(session: Any, n: int) -> tuple[str, ...]:
    """One partition value per partition of a pass repartitioned by ``_rs_pk`` into ``n``:
    value ``i`` lands in partition ``i`` (Spark puts a value in ``pmod(hash(value), n)``;
    Spark computes that here, so the values are right for whatever Spark runs the pass)."""
    key = (id(session), n)
    if key not in _SPREAD:
        found: dict[int, str] = {}
        tried = 0
        while len(found) < n:
            more = 32 * n
            rows = (
                session.range(tried, tried + more)
                .selectExpr("concat('c', CAST(id AS STRING), ';') AS v")
                .selectExpr("v", f"pmod(hash(v), {n}) AS p")
                .groupBy("p")
                .agg({"v": "min"})
                .collect()
            )
            for p, v in rows:
                found.setdefault(p, v)
            tried += more
        _SPREAD[key] = tuple(found[i] for i in range(n))
    return _SPREAD[key]


def replay_dir() -> str:
    """A private directory of the kernel's scratch for one replay's values and start shares
    (removed when it ends, ``passes._driver.run_passes``)."""
    import tempfile

    from ....io.log import scratch_dir

    return tempfile.mkdtemp(dir=scratch_dir(), prefix="values-")


def _arranged_locally(
    rep: Any, pp: PassPlan, events: Any, log_kinds: dict, start: dict | None
) -> dict:
    """The passes whose events the driver arranges (``passes._local_arrangement``), each with the
    columns it is partitioned by; empty unless every pass with log events can: on a local
    master, a large log of the kernel's, passes of the serial engine's loop over log events
    only, each partitioned by plain columns, and a pass taking events from another zipped.
    A replay from a ``start`` state needs it dealt to their partitions (``passes._start_shares``);
    otherwise its passes take it as rows through Spark's sort."""
    from ._local_arrangement import use_local
    from ._start_shares import dealable
    from ._zipped import takes_from_passes, zipped_passes

    if not dealable(pp, log_kinds, start):
        return {}
    if pp.schedules or pp.reason or events.pickled:
        return {}
    passes = pp.passes
    forwarding = forwards(pp)
    by: dict[int, list[str]] = {}
    for p in passes:
        if p.lookup:
            continue  # its events come packed from the pass that looks its key up (_lookups)
        senders = any(p.index in q.sends for q in passes[: p.index])
        if not log_kinds[p.index]:
            if senders:
                return {}
            continue
        raw = raw_key(p.partition, events)
        if raw is None or p.feeds or p.blind or (senders and not forwarding):
            return {}
        if p.serves or p.consumes or p.probe_kinds:
            if not forwarding:
                return {}
        by[p.index] = [unquoted(c) for c in raw]
    if not by or not use_local(rep.session, events, len(rep.log), list(by.values())):
        return {}
    if forwarding and any(takes_from_passes(passes, p, log_kinds) for p in passes):
        zips = zipped_passes(rep.session, pp, log_kinds, lambda p: by.get(p.index))
        if set(zips) != {p.index for p in passes if takes_from_passes(passes, p, log_kinds)}:
            return {}
    return by


_FRAMES: dict[tuple, Any] = {}


def _log_frame(session: Any, log: Log, events: Any) -> Any:
    """The log's events as a DataFrame with their positions, made once per session and log
    (the two most recent are kept): read by Spark from the log's ordered copy, or from a
    local file of the events the kernel holds (:func:`_local_events_file`), or else
    persisted."""
    key = (id(session), log.fingerprint)
    df, local_file = _FRAMES.get(key, (None, None))
    if df is not None and (local_file is None or os.path.exists(local_file)):
        return df
    local_file = None
    if log.uri is not None:  # Spark's reader made it (see _uri_log)
        from .._uri_log import uri_frame

        df = uri_frame(session, log)
    elif not events.table.num_rows and len(log):  # its tasks read the log's ordered copy
        from pyspark.sql.pandas.types import from_arrow_schema

        local_file = str(log.ordered().path)
        schema = from_arrow_schema(events.table.drop_columns(["_rs_o"]).schema)
        df = session.read.schema(schema).parquet(local_file)
    elif (local_file := _local_events_file(session, log, events)) is not None:
        from pyspark.sql.pandas.types import from_arrow_schema

        # The schema given, Spark reads no footer in a job of its own to find it.
        schema = from_arrow_schema(events.table.drop_columns(["_rs_o"]).schema)
        df = session.read.schema(schema).parquet(local_file)
    else:
        df = session.createDataFrame(events.table.drop_columns(["_rs_o"]))
    # A log event's order is its lsn (unique, and increasing in log order).
    df = df.selectExpr(
        "*",
        "lsn AS _rs_o",
        "ts AS _rs_t",
        "CAST(2 AS TINYINT) AS _rs_ph",
        "X'' AS _rs_sub",
        f"CAST({W.TAG_EVENT} AS TINYINT) AS _rs_tag",
    )
    if local_file is None:
        df = df.persist()  # a file is read again faster than a cache of its rows is built
    _FRAMES.pop(key, None)
    while len(_FRAMES) >= 2:
        old, _file = _FRAMES.pop(next(iter(_FRAMES)))
        try:
            old.unpersist()
        except Exception:  # noqa: BLE001 - its session may be gone
            pass
    _FRAMES[key] = (df, local_file)
    return df


#: From how many events a local master reads the log's frame from a file: a small table is
#: made into a frame as fast as a file is written and read.
FILE_ROWS = 200_000


def _local_events_file(session: Any, log: Log, events: Any) -> str | None:
    """On a local master, for a log of :data:`FILE_ROWS` events or more, the events as a
    Parquet file in the kernel's private scratch directory (written once per log), for
    Spark's own reader: building a frame of a large Arrow table in the driver
    (``createDataFrame``) cost half of a cold replay of 10M events. None elsewhere (executors
    may not share the kernel's disk), and for a log with pickled columns (pickles never go
    to a file)."""
    if events.pickled or len(events.table) < FILE_ROWS or not local_master(session):
        return None
    table = events.table.drop_columns(["_rs_o"])
    return str(scratch_parquet(table, f"{log.fingerprint}.events.parquet"))


_ARRANGED: dict[tuple, Any] = {}
_ARRANGED_KEPT = 4
#: The columns of a packed arrangement (besides the partition columns): one row per chunk.
PACKED_SEQ, PACKED_IPC = "_rs_seq", "_rs_ipc"
_PACK_ROWS = 65_536


def arranged(setup: Setup, rows: Any, by: list[str] | None = None, n: int = 0) -> tuple:
    """``rows`` (a pass's log events, partitioned and sorted, from the log's DataFrame alone)
    packed (:class:`PackTask`) and kept for the next replay that arranges the same log the
    same way, and whether it is packed.

    A notebook replays one log many times: a warm replay then starts at its handlers, with no
    shuffle and no sort. Packed, each partition is a few rows of Arrow IPC (its events in
    chunks, in order), so a warm replay also skips turning a million events into Spark rows
    and back into Arrow, which cost more CPU than the handlers of a simple rule. With ``by``
    (the partition columns) the packed rows carry the partition values of their first event
    and are partitioned by them again, into ``n`` partitions: each lands where its events
    were, and Spark knows how the frame is partitioned (``passes._driver._zipped_input`` needs that).
    The log is immutable (its fingerprint is part of the key), so a kept arrangement is the
    one the replay would compute. The most recent few are kept."""
    if not classic(setup.session):
        return rows, False
    try:
        key = (id(setup.session), setup.log.fingerprint, rows.semanticHash(), tuple(by or ()), n)
    except Exception:  # noqa: BLE001 - no plan to compare: arrange this time only
        return rows, False
    kept = _ARRANGED.pop(key, None)
    if kept is not None:
        plan, packed = kept
        try:
            if plan.sameSemantics(rows):
                _ARRANGED[key] = kept  # now the most recent
                return packed, True
        except Exception:  # noqa: BLE001 - its session is gone
            pass
        _unpersist(packed)
    names = [unquoted(c) for c in by or ()]
    fields = [f for f in rows.schema.fields if f.name in names]
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    schema = StructType(
        [*fields, StructField(PACKED_SEQ, LongType()), StructField(PACKED_IPC, BinaryType())]
    )
    packed = rows.mapInArrow(PackTask(tuple(names)), schema)
    if by:
        packed = packed.repartition(n, *by)
    packed = packed.persist()
    while len(_ARRANGED) >= _ARRANGED_KEPT:
        _unpersist(_ARRANGED.pop(next(iter(_ARRANGED)))[1])
    _ARRANGED[key] = (rows, packed)
    return packed, True


class PackTask:
    """``mapInArrow``: a partition's events as rows of Arrow IPC, ``_PACK_ROWS`` events each,
    numbered in order, with the partition values (``names``) of each chunk's first event."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names

    def __call__(self, batches: Any) -> Any:
        seq = 0
        chunk: list = []
        held = 0
        for batch in batches:
            if batch.num_rows:
                chunk.append(batch)
                held += batch.num_rows
            if held >= _PACK_ROWS:
                yield self._row(chunk, seq)
                seq, chunk, held = seq + 1, [], 0
        if held:
            yield self._row(chunk, seq)

    def _row(self, chunk: list, seq: int) -> pa.RecordBatch:
        first = {name: chunk[0].column(name).slice(0, 1) for name in self.names}
        return pa.RecordBatch.from_arrays(
            [
                *first.values(),
                pa.array([seq], pa.int64()),
                pa.array([W.packed_bytes(chunk)], pa.binary()),
            ],
            names=[*first, PACKED_SEQ, PACKED_IPC],
        )


def unpacked(batches: Any) -> Any:
    """The events of packed rows (:func:`arranged`), in order; other rows as they come (the
    values of a zipped pass, before its events). A chunk out of order fails the task."""
    last = -1
    for batch in batches:
        if PACKED_IPC not in batch.schema.names:
            yield batch
            continue
        blobs = batch.column(PACKED_IPC)
        if blobs.null_count:
            rows = batch.num_rows - blobs.null_count
            if blobs.slice(batch.num_rows - rows).null_count:
                raise RuntimeError("packed events came mixed with other rows")
            yield batch.slice(0, batch.num_rows - rows)
            batch, blobs = batch.slice(batch.num_rows - rows), blobs.slice(batch.num_rows - rows)
        for seq, blob in zip(batch.column(PACKED_SEQ).to_pylist(), blobs):
            if seq != last + 1:
                raise RuntimeError(f"packed events: chunk {seq} came after chunk {last}")
            last = seq
            yield from W.packed_batches(blob)


def _unpersist(frame: Any) -> None:
    try:
        frame.unpersist()
    except Exception:  # noqa: BLE001 - its session may be gone
        pass


def classic(session: Any) -> bool:
    try:
        session.sparkContext  # noqa: B018 - raises on Spark Connect
        return True
    except Exception:  # noqa: BLE001
        return False


def local_master(session: Any) -> bool:
    """Whether ``session`` runs its tasks on this machine (a classic session on ``local``):
    they then share the kernel's disk."""
    try:
        return session.sparkContext.master.startswith("local")
    except Exception:  # noqa: BLE001 - Spark Connect has no context here
        return False


def _used_columns(program: Program, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The log columns the handlers read: ``lsn``, ``ts``, ``kind`` and every ``e.column``;
    all of them when a handler uses its event otherwise (passes it on, prints it...)."""
    import ast

    names = {"lsn", "ts", "kind"}
    for handler in program.handlers:
        arg = handler.event_arg
        if arg is None:
            continue
        attribute_of = {
            id(node.value)
            for node in ast.walk(handler.node)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        }
        for node in ast.walk(handler.node):
            if isinstance(node, ast.Name) and node.id == arg:
                if id(node) not in attribute_of:
                    return columns
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == arg
            ):
                names.add(node.attr)
    return tuple(c for c in columns if c in names)


def raw_key(partition: str, events: Any) -> list[str] | None:
    """The log columns a partition key is made of, when it is a column or a tuple of columns
    of one plain type each: Spark then partitions by them, and equal keys meet as in Python."""
    import ast

    try:
        node = ast.parse(partition, mode="eval").body
    except SyntaxError:
        return None
    parts = node.elts if isinstance(node, ast.Tuple) else [node]
    names = []
    for part in parts:
        if not (
            isinstance(part, ast.Attribute)
            and isinstance(part.value, ast.Name)
            and part.value.id == "e"
            and part.attr in events.types
            and part.attr not in events.pickled
        ):
            return None
        names.append(quoted(part.attr))
    return names or None


def _ddl_type(t: Any) -> str:
    import pyarrow as pa

    if t == pa.int8():
        return "TINYINT"
    if t == pa.int32():
        return "INT"
    if t == pa.int64():
        return "BIGINT"
    if t == pa.float64():
        return "DOUBLE"
    if t == pa.binary():
        return "BINARY"
    if t == pa.int16():
        return "SMALLINT"
    if t == pa.float32():
        return "FLOAT"
    if t == pa.bool_():
        return "BOOLEAN"
    return "STRING"
