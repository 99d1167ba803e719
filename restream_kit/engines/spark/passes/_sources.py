"""Where a pass's input comes from: one small typed source per place, chosen once per pass.

A pass's job runs over one DataFrame. Where its rows come from is one of seven sources, each a
frozen dataclass with one method, :meth:`frame`, that gives the job its rows (and its number
of partitions), from what the run holds so far (:class:`Run`: the log's frame, what earlier
passes sent, the state a replay starts from):

- :class:`LogEvents`: the log's events of its kinds, shuffled by its key and sorted, packed and
  kept for the next replay where they can be (``_packing.arranged``); with its share of a
  start state as rows before them (``_start_shares``) where it has one;
- :class:`Forwarded`: the same, each kind from the last earlier pass that had its events (they
  carry the values read there, ``_plain``) or else from the log;
- :class:`Zipped`: the values read upstream, then its events from the log, partitioned alike
  (``_zipped``);
- :class:`Arranged`: a marker row per partition; the tasks read their events from the files
  the driver arranged (``_local_arrangement``);
- :class:`LookedUp`: its events packed by the pass that looks its key up (``_lookups``);
- :class:`NarrowSent`: a close pass's narrow rows, from the files its adding tasks wrote
  (``_narrow_files``);
- :class:`Sent`: rows with positions, sorted by them: its log events, the probe values,
  writes and events earlier passes sent it, the state a replay starts from.

:func:`source_of` chooses a pass's source (None: nothing reaches it, no job). The source
travels to the tasks in the pass's ``PassSpec.source`` (it holds no frame), and
:func:`task_input` reads a task's rows as it says.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from . import _rows as W
from ._local_arrangement import (
    LocalInput,
    local_batches,
    local_input,
    local_part,
    local_start,
    marker_frame,
)
from ._lookups import looked_up_input, merged_events
from ._machine import classic
from ._narrow_files import narrow_batches
from ._packing import arranged, unpacked
from ._plan import ORDER, SINGLE
from ._sql import kinds_sql, quoted, raw_key
from ._start_shares import start_of, taken_start
from ._zipped import PART, VALUES, sources, takes_from_passes, unzip

__all__ = [
    "Run",
    "Source",
    "LogEvents",
    "Forwarded",
    "Zipped",
    "Arranged",
    "LookedUp",
    "NarrowSent",
    "Sent",
    "source_of",
    "task_input",
    "POSITION",
]

#: The position columns of a row (``passes._rows``).
POSITION = ("_rs_t", "_rs_ph", "_rs_o", "_rs_sub")


@dataclass
class Run:
    """What the passes of one run hold on the driver: the replay's ``setup``, the log's
    events it runs over (``df``), the state it starts from as rows (``carry``) or dealt
    (``starts``, ``passes._start_shares.Starts``), the passes' outputs so far, and the files
    of values they sent driver-arranged passes (pass -> partition -> paths)."""

    setup: Any
    df: Any
    carry: Any = None
    starts: Any = None
    outputs: list = field(default_factory=list)
    sent: dict[int, dict[int, list[str]]] = field(default_factory=dict)

    def fed(self, p: Any) -> bool:
        """Whether earlier passes send ``p`` rows, or the start state comes to it as rows."""
        passes = self.setup.pp.passes
        senders = any(p.index in q.sends for q in passes[: p.index])
        return (senders and self.setup.wide is None) or (
            self.carry is not None and not self.shared(p)
        )

    def shared(self, p: Any) -> bool:
        """Whether ``p`` takes its share of the start as rows of its own (``_start_shares``)."""
        return self.starts is not None and p.index in self.starts.frames

    def partitions(self, p: Any) -> int:
        return 1 if p.partition == SINGLE else self.setup.partitions


class Source:
    """A pass's input (see the module docstring)."""

    #: Whether its rows come with positions (``POSITION``, ``_rs_tag``), not as log events.
    receives: ClassVar[bool] = False
    #: The kind of all its events, when their kind column is not sent.
    one_kind: str | None = None
    #: Whether its tasks start from a start state or stop before the log's end (a wave).
    partial: bool = False

    def frame(self, run: Run, p: Any) -> tuple[Any, int]:
        """Pass ``p``'s rows for its job, and their number of partitions."""
        raise NotImplementedError


@dataclass(frozen=True)
class LogEvents(Source):
    """Its kinds' events from the log only, no position columns but their own; the raw key
    columns to partition by when the key is plain columns; not their kind, when the inlined
    loop takes events of ``one_kind``. With ``share``: its share of the start first."""

    one_kind: str | None = None
    share: bool = False

    @property
    def partial(self) -> bool:  # type: ignore[override]
        return self.share

    def frame(self, run: Run, p: Any) -> tuple[Any, int]:
        setup = run.setup
        raw = raw_key(p.partition, setup.events)
        readers = sorted({probe.reader for probe in p.serves})
        columns = [quoted(c) for c in setup.columns]
        rows = run.df.where(f"kind IN ({kinds_sql(setup.log_kinds[p.index])})").selectExpr(
            *([] if raw is not None else [f"_rs_pk{p.index} AS _rs_pk"]),
            *[c for c in columns if self.one_kind is None or c != "`kind`"],
            *[f"_rs_pk{r}" for r in readers],
        )
        if self.share:
            rows = rows.unionByName(run.starts.frames[p.index], allowMissingColumns=True)
        rows = _null_probes(run, p, rows)
        return _shuffled(run, p, rows, raw, packs=not setup.python_keys and not self.share)


@dataclass(frozen=True)
class Forwarded(Source):
    """Each kind from the last earlier pass that had its events (they carry the probe values
    picked up there), else from the log."""

    def frame(self, run: Run, p: Any) -> tuple[Any, int]:
        setup = run.setup
        df, passes = run.df, setup.pp.passes
        columns = [quoted(c) for c in setup.columns]
        carried = list(setup.forward_pks) + [PART.format(j) for j in setup.zips]
        carried += [f"_rs_q{c}{s}" for s in range(setup.slots) for c in "ldb"]
        parts = []
        taken = sources(passes, p, setup.log_kinds)
        for source, some in taken.items():
            where = f"kind IN ({kinds_sql(some)})"
            if source is None:
                frame = df.where(where)
                parts.append(frame.selectExpr(*columns, *[c for c in carried if c in df.columns]))
            else:
                frame = run.outputs[source].where(f"_rs_kind = {W.FWD} AND {where}")
                parts.append(frame.selectExpr(*columns, *carried))
        rows = _union(parts)
        raw = raw_key(p.partition, setup.events) or [f"_rs_pk{p.index}"]
        # (``any`` over the sources' passes: pass 0 counts as the log does, as it always has.)
        return _shuffled(run, p, rows, raw, packs=not setup.python_keys and not any(taken))


@dataclass(frozen=True)
class Zipped(Source):
    """The values packed for it by earlier passes, partitioned by its partition columns,
    then its events from the log, arranged alike (``passes._zipped``)."""

    def frame(self, run: Run, p: Any) -> tuple[Any, int]:
        setup = run.setup
        n = run.partitions(p)
        by = setup.zips[p.index]
        df = setup.df
        parts = [PART.format(j) for j in setup.zips]
        extra = [c for c in (*setup.forward_pks, *parts) if c in df.columns]
        events = (
            df.where(f"kind IN ({kinds_sql(setup.log_kinds[p.index])})")
            .selectExpr(*[quoted(c) for c in setup.columns], *extra)
            .repartition(n, *by)
            .sortWithinPartitions("ts", "lsn")
        )
        if not setup.python_keys:
            events, _packed = arranged(setup, events, by, n)
        values = None
        for source in sources(setup.pp.passes, p, setup.log_kinds):
            if source is None:
                continue
            frame = (
                run.outputs[source]
                .where(f"_rs_kind = {W.FWD} AND _rs_dest = {p.index}")
                .selectExpr(*by, f"_rs_b AS {VALUES}")
            )
            values = frame if values is None else values.unionByName(frame)
        values = values.repartition(n, *by)
        return values.unionByName(events, allowMissingColumns=True), n


@dataclass(frozen=True)
class Arranged(Source):
    """Its events arranged by the driver (``local``: where each partition's files are, and
    the files of values earlier passes sent it); ``zipped`` when those values come first."""

    local: LocalInput
    zipped: bool = False
    one_kind: str | None = None

    @property
    def partial(self) -> bool:  # type: ignore[override]
        return self.local.after is not None or self.local.until is not None

    def frame(self, run: Run, p: Any) -> tuple[Any, int]:
        n = run.partitions(p)
        return marker_frame(run.setup.session, n), n


@dataclass(frozen=True)
class NarrowSent(Source):
    """A close pass's narrow rows, from the files its adding tasks wrote for each of its
    partitions (``files``, ``passes._narrow_files``): a marker row per partition."""

    files: tuple[tuple[str, ...], ...] = ()

    def frame(self, run: Run, p: Any) -> tuple[Any, int]:
        n = run.partitions(p)
        return marker_frame(run.setup.session, n), n


@dataclass(frozen=True)
class LookedUp(Source):
    """Its events packed by the pass that looked its key up: as rows of that pass's output,
    or, when the driver arranged the passes, from the files of each partition (``files``)."""

    files: tuple = ()

    def frame(self, run: Run, p: Any) -> tuple[Any, int]:
        n = run.partitions(p)
        if self.files:  # each task reads the files sent its partition
            return marker_frame(run.setup.session, n), n
        # (its task sorts its events: ``passes._lookups``)
        return looked_up_input(run.outputs, p).repartition(n, "_rs_pk"), n


@dataclass(frozen=True)
class Sent(Source):
    """Rows with positions: its log events, what earlier passes sent it (probe values, writes,
    scheduled events) and the state the replay starts from (``run.carry``), by position."""

    receives: ClassVar[bool] = True

    def frame(self, run: Run, p: Any) -> tuple[Any, int]:
        setup = run.setup
        passes = setup.pp.passes
        forwarding = setup.wide is not None
        kinds = setup.log_kinds[p.index]
        readers = sorted({probe.reader for probe in p.serves})
        parts = []
        if kinds:
            parts.append(
                run.df.where(f"kind IN ({kinds_sql(kinds)})").selectExpr(
                    *POSITION,
                    "_rs_tag",
                    f"_rs_pk{p.index} AS _rs_pk",
                    *[quoted(c) for c in setup.columns],
                    *[f"_rs_pk{r}" for r in readers],
                )
            )
        consumed = [probe.slot for probe in p.consumes]
        for j, out in enumerate(run.outputs):
            if p.index not in passes[j].sends or forwarding:
                continue
            parts.append(
                out.where(
                    f"_rs_dest = {p.index} AND _rs_kind IN "
                    f"({W.WRITE}, {W.SCHED}, {W.PROBE}, {W.VERS})"
                ).selectExpr(
                    *POSITION,
                    f"CAST(CASE _rs_kind WHEN {W.PROBE} THEN {W.TAG_PROBE} "
                    f"WHEN {W.WRITE} THEN {W.TAG_WRITE} WHEN {W.VERS} THEN {W.TAG_VERS} "
                    f"ELSE {W.TAG_SCHED} END AS TINYINT) AS _rs_tag",
                    "_rs_pk",
                    "_rs_b",
                    *[f"_rs_q{c}{s}" for s in consumed for c in "ldb"],
                )
            )
        if run.carry is not None and not run.shared(p):
            parts.append(
                run.carry.where(f"_rs_dest = {p.index}").selectExpr(
                    *POSITION, "_rs_tag", "_rs_pk", "_rs_b"
                )
            )
        rows = _union(parts)
        if "_rs_b" not in rows.columns:
            rows = rows.selectExpr("*", "CAST(NULL AS BINARY) AS _rs_b")
        rows = _null_probes(run, p, rows)
        n = run.partitions(p)
        return rows.repartition(n, "_rs_pk").sortWithinPartitions(*POSITION, "_rs_tag"), n


def source_of(run: Run, p: Any, plain: bool) -> Source | None:
    """Where pass ``p`` takes its input from in ``run`` (``plain``: whether it runs the
    serial engine's inlined loop); None when nothing reaches it (its kinds are not in the
    log, and no earlier pass sends it anything)."""
    setup = run.setup
    kinds = setup.log_kinds[p.index]
    forwarding = setup.wide is not None
    one_kind = kinds[0] if len(kinds) == 1 and plain else None
    if p.index in setup.narrow:
        sent = run.sent.get(p.index, {})
        return NarrowSent(tuple(tuple(sent.get(i, ())) for i in range(run.partitions(p))))
    if p.index in setup.local:
        local = local_input(setup, run.sent.get(p.index, {}), p, run.partitions(p))
        if run.starts is not None:
            local = replace(
                local, after=run.starts.after, starts=run.starts.shares.get(p.index, ())
            )
        if setup.until is not None:
            local = replace(local, until=setup.until)
        return Arranged(local, p.index in setup.zips, one_kind)
    if p.lookup:
        if not kinds:
            return None  # (no event reaches it: no job)
        if not setup.local:
            return LookedUp()
        sent = run.sent.get(p.index, {})
        return LookedUp(tuple(tuple(sent.get(i, ())) for i in range(run.partitions(p))))
    if kinds and forwarding:
        if setup.zips and takes_from_passes(setup.pp.passes, p, setup.log_kinds):
            return Zipped()
        return Forwarded()
    if run.fed(p):
        return Sent()
    if kinds:
        share = run.starts.frames.get(p.index) if run.starts is not None else None
        return LogEvents(one_kind, share is not None)
    return None


def _union(parts: list) -> Any:
    rows = parts[0]
    for part in parts[1:]:
        rows = rows.unionByName(part, allowMissingColumns=True)
    return rows


def _null_probes(run: Run, p: Any, rows: Any) -> Any:
    """``rows`` with the probe columns ``p`` reads that none of its parts has, null (none
    when the passes forward events: those carry them)."""
    if run.setup.wide is not None:
        return rows
    for s in (probe.slot for probe in p.consumes):
        for c, typ in (("l", "BIGINT"), ("d", "DOUBLE"), ("b", "BINARY")):
            if f"_rs_q{c}{s}" not in rows.columns:
                rows = rows.selectExpr("*", f"CAST(NULL AS {typ}) AS _rs_q{c}{s}")
    return rows


def _shuffled(run: Run, p: Any, rows: Any, raw: list | None, packs: bool) -> tuple[Any, int]:
    """A pass's log events partitioned as the pass is and sorted in log order; packed and kept
    (``packs``: from the log alone, and partition values from SQL: the same next time)."""
    setup = run.setup
    partitions = setup.partitions
    n = run.partitions(p)
    if p.partition == ORDER:
        # In any partitions: no shuffle, each sorted as it is; but a frame in fewer
        # partitions than tasks run at once (a log read from its file may be: Spark splits
        # a file by row groups) is spread round-robin first, or the pass is one task.
        n = rows.rdd.getNumPartitions() if classic(setup.session) else partitions
        if n < min(partitions, setup.rep.cores):
            rows, n = rows.repartition(partitions), partitions
    elif p.partition == SINGLE:
        rows = rows.repartition(1)
    else:
        rows = rows.repartition(n, *(raw or ["_rs_pk"]))
    rows = rows.sortWithinPartitions("ts", "lsn")
    if packs:
        rows, _packed = arranged(setup, rows)
    return rows, n


# -- the task side ------------------------------------------------------------------------------


def task_input(source: Source, batches: Iterator) -> tuple[Iterator, dict | None]:
    """A task's rows as its pass's ``source`` sends them, and its share of the state the
    replay starts from (``{"stores": .., "future": ..}``, ``passes._start_shares``), if any:
    a driver-arranged partition's files, looked-up events merged in log order, packed
    events unpacked, values joined to their events, a share taken off the front."""
    if isinstance(source, Arranged):
        part = local_part(batches)
        share = local_start(source.local, part)
        batches = local_batches(source.local, part)
        return (unzip(batches) if source.zipped else batches), (
            None if share is None else start_of(share)
        )
    if isinstance(source, NarrowSent):
        return narrow_batches(source.files[local_part(batches)]), None
    if isinstance(source, LookedUp):
        return merged_events(batches, source.files), None
    if isinstance(source, LogEvents) and source.share:
        return taken_start(batches)
    if isinstance(source, Zipped):
        return unzip(unpacked(batches)), None
    if isinstance(source, Sent):
        return batches, None
    return unpacked(batches), None  # (events packed by ``_packing.arranged``, or as they are)
