"""What every pass job of a replay shares: the log as a DataFrame, with the partition value of
every pass computed once (in Spark SQL for plain columns, in Python otherwise), the columns
that travel, and the schema of the passes' output (wider when the passes forward events).

The SQL text is ``_sql``'s, where tasks run ``_machine``'s, a warm replay's packed events
``_packing``'s and the ranges of passes holding copies ``_ranges``'."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ....io.log import Log, scratch_parquet
from ....model.program import Program
from .._events import copy_file, log_events
from .._keys import KeysSpec, KeysTask, jvm_key
from .._program_ref import ProgramRef
from .._uri_log import uri_events, uri_frame
from . import _rows as W
from ._local_arrangement import use_local
from ._machine import local_master, replay_dir
from ._narrow_files import covered, narrow_passes
from ._plan import BY_KEY, ORDER, SINGLE, PassPlan, forwards
from ._ranges import copy_ranges, spread_values
from ._sql import ddl_type, quoted, raw_key, unquoted
from ._start_shares import dealable
from ._window_shapes import closes_once, folded_counts
from ._zipped import PART, takes_from_passes, zipped_passes

__all__ = ["Setup", "prepare", "wave_end", "FILE_ROWS"]


@dataclass
class Setup:
    """What every pass job of a replay shares: the log's DataFrame with the partition value
    of every pass, the columns that travel, and the output schema."""

    rep: Any
    pp: PassPlan
    events: Any
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
    # Close passes whose narrow rows go through files (``passes._narrow_files``): pass -> the
    # log columns of its windows' key.
    narrow: dict = field(default_factory=dict)
    # A wave's run (``_waves``): the lsn of its last event; no pass reads an event after it.
    until: int | None = None
    outputs: Any = None  # where tasks write large output tables (``passes._output_files``)

    # The replay's own, read from it rather than copied, so that they cannot disagree.
    @property
    def program(self) -> Program:
        return self.rep.program

    @property
    def log(self) -> Log:
        return self.rep.log

    @property
    def session(self) -> Any:
        return self.rep.session


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
    program: Program = rep.program
    log: Log = rep.log
    session = rep.session
    if events is None and log.uri is not None:  # read by Spark, never here: see _uri_log
        events = uri_events(log)
    # A log with an ordered copy on this disk: no row here, the tasks read the copy.
    events = events or log_events(log, session)
    passes = pp.passes
    # The kinds each pass takes from the log: a kind only ever scheduled costs no log scan.
    present = set(log.kinds)
    log_kinds = {p.index: tuple(k for k in p.event_kinds if k in present) for p in passes}
    narrow = narrow_passes(pp, events, log_kinds) if _own_windows(rep, start) else {}
    local = _arranged_locally(rep, pp, events, log_kinds, start, narrow)
    narrow = narrow if local else {}
    # Passes whose events the driver arranges read no frame of the log.
    df = None if local else _log_frame(session, log, events)
    # Keys the driver deals into balanced partitions need no more partitions than cores;
    # a hash partitioning has twice as many, to even out where its keys land.
    partitions = max(1, int(rep.options.partitions or rep.cores * (1 if local else 2)))
    ranges = {}
    if df is not None and not (start is not None and start["scheduled"]):
        first = rep.begun.done if start is not None else 0  # (the events before the start)
        ranges = copy_ranges(session, pp, events, first, partitions, log)
    ref = ProgramRef.of(program)
    df, python_keys, persisted = _with_partition_values(df, pp, events, log_kinds, ranges, ref)
    # Only the columns the program can read travel (all of them for quarantine rows).
    columns = events.columns if rep.on_error != "stop" else _used_columns(program, events.columns)
    slots = sum(len(p.serves) for p in passes)
    wide, pks = _wide(pp, df, events, columns, slots, start, local)
    zips: dict[int, list[str]] = {}
    if wide is not None:
        df, zips = _zipped(session, pp, df, events, log_kinds, partitions)
    return Setup(
        rep=rep,
        pp=pp,
        events=events,
        df=df,
        log_kinds=log_kinds,
        partitions=partitions,
        columns=columns,
        slots=slots,
        ref=ref,
        ddl=", ".join(
            f"{quoted(f.name)} {ddl_type(f.type)}"
            for f in (W.OUT_SCHEMA(slots) if wide is None else wide)
        ),
        started=started,
        persisted=persisted,
        wide=wide,
        python_keys=frozenset(c for c, _, _ in python_keys),
        forward_pks=tuple(pks) if wide is not None else (),
        closes_once=closes_once(program),
        folds=folded_counts(program),
        zips=zips,
        local=local,
        values_dir=replay_dir()
        if local and (zips or narrow or any(p.lookup for p in passes))
        else None,
        narrow=narrow,
        spread={
            p.index: ("N",) if p.partition == SINGLE else spread_values(session, partitions)
            for p in passes
            if p.copies or p.lookup
        },
        ranges={i: bounds for i, (_sql, bounds) in ranges.items()},
    )


def _with_partition_values(
    df: Any, pp: PassPlan, events: Any, log_kinds: dict, ranges: dict, ref: ProgramRef
) -> tuple[Any, list, list]:
    """The log's frame ``df`` with every pass's partition value ``_rs_pk<pass>``: in Spark SQL
    where it can be, else computed in Python (:class:`KeysTask`, the frame then persisted);
    those computed in Python ``(column, partition, kinds)``, and the frames persisted."""
    passes = pp.passes
    persisted = []
    python_keys = []
    sql = []
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
    return df, python_keys, persisted


def _wide(
    pp: PassPlan, df: Any, events: Any, columns: tuple, slots: int, start: Any, local: dict
) -> tuple[pa.Schema | None, list[str]]:
    """The passes' output schema when they forward events (None when they do not), and the
    partition values forwarded events carry."""
    if not (forwards(pp) and (start is None or local)):
        return None, []
    # The events travel from pass to pass with the probe values they pick up: every
    # pass's output has room for them (their columns and their partition values).
    # Partition values travel only for passes partitioned by more than plain columns
    # (the others partition by the event's own columns).
    plain_keyed = {f"_rs_pk{p.index}" for p in pp.passes if raw_key(p.partition, events)}
    pks = (
        [c for c in df.columns if c.startswith("_rs_pk") and c not in plain_keyed]
        if df is not None
        else []
    )
    extra = [pa.field(c, events.types[c]) for c in columns]
    extra += [pa.field(c, pa.string()) for c in pks]
    return pa.schema([*W.OUT_SCHEMA(slots), *extra]), pks


def _zipped(
    session: Any, pp: PassPlan, df: Any, events: Any, log_kinds: dict, partitions: int
) -> tuple[Any, dict[int, list[str]]]:
    """The zipped passes (``passes._zipped``) with their partition columns, and the log's
    frame with each event's partition in every one of them, as Spark's repartition puts it."""

    def by_of(p: Any) -> list[str] | None:
        if p.partition in (ORDER, SINGLE, BY_KEY) or p.lookup:
            return None  # (a looked-up key: no event's partition is known before)
        return raw_key(p.partition, events) or [f"_rs_pk{p.index}"]

    zips = zipped_passes(session, pp, log_kinds, by_of)
    if zips and df is not None:
        df = df.selectExpr(
            "*",
            *[
                f"pmod(hash({', '.join(by)}), {partitions}) AS {PART.format(j)}"
                for j, by in zips.items()
            ],
        )
    return df, zips


def _own_windows(rep: Any, start: dict | None) -> bool:
    """Whether the passes run closing windows natively, closes and narrow rows included, as
    the serial engine would (``passes._jobs._own``): no checkpoint, start, cut, guard or
    history."""
    options = rep.options
    if start is not None or any(
        getattr(options, k) for k in ("checkpoint", "resume", "start_from")
    ):
        return False
    return rep.until is None and rep.on_error == "stop" and not getattr(rep, "history", None)


def _arranged_locally(
    rep: Any, pp: PassPlan, events: Any, log_kinds: dict, start: dict | None, narrow: dict
) -> dict:
    """The passes whose events the driver arranges (``passes._local_arrangement``), each with the
    columns it is partitioned by; empty unless every pass with log events can: on a local
    master, a large log of the kernel's, passes of the serial engine's loop over log events
    only, each partitioned by plain columns, and a pass taking events from another zipped.
    A replay from a ``start`` state needs it dealt to their partitions (``passes._start_shares``);
    otherwise its passes take it as rows through Spark's sort. Closing windows may be among
    them where nothing they schedule crosses passes but narrow rows through files to the
    close passes of ``narrow`` (``passes._narrow_files``)."""
    if not dealable(pp, log_kinds, start):
        return {}
    if pp.reason or events.pickled:
        return {}
    if pp.schedules and not (_own_windows(rep, start) and covered(pp, narrow)):
        return {}
    passes = pp.passes
    forwarding = forwards(pp)
    by: dict[int, list[str]] = {}
    for p in passes:
        if p.lookup:
            continue  # its events come packed from the pass that looks its key up (_lookups)
        if p.index in narrow:
            continue  # its windows' adds come as files (``_narrow_files``)
        senders = any(p.index in q.sends for q in passes[: p.index])
        if not log_kinds[p.index]:
            if senders:
                return {}
            continue
        raw = raw_key(p.partition, events)
        # (a narrowed window's states: its adds go as narrow rows instead)
        blind = [s for s in p.blind if not any(s.startswith(f"{w}__") for w in p.narrow_to)]
        if raw is None or p.feeds or blind or (senders and not forwarding):
            return {}
        if p.serves or p.consumes or p.probe_kinds:
            if not forwarding:
                return {}
        by[p.index] = [unquoted(c) for c in raw]
    if any(q not in narrow for p in passes for q in p.narrow_to.values()):
        return {}  # (some adds would go as writes, through Spark)
    keyed = [*by.values(), *narrow.values()]
    if not by or not use_local(rep.session, events, len(rep.log), keyed):
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
        df = uri_frame(session, log)
        if log.copied:  # it reads Spark's ordered copy: read again, as a path log's, not cached
            local_file = str(log.ordered().path)
    elif not events.table.num_rows and len(log):  # its tasks read the log's ordered copy
        from pyspark.sql.pandas.types import from_arrow_schema

        local_file = copy_file(session, log)  # (on a cluster, the shared directory's)
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


def _used_columns(program: Program, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The log columns the handlers read: ``lsn``, ``ts``, ``kind`` and every ``e.column``;
    all of them when a handler uses its event otherwise (passes it on, prints it...)."""
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
