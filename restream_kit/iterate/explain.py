"""Explain one difference between two runs: why v2 emitted a row that v1 did not (or back).

``explain(v2, v1, row, log=...)`` replays both programs serially over the log with their
state traced (see ``docs/iterate.md``): first to capture the state reads of the run that
emitted the row, exactly as the handler made them (state, key, value, line), then to trace
every write to those keys. The answer is recomputed, so it is exact: no history is guessed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..compiler.compile import compile_program
from ..compiler.inline import SCHEDULED_RUNNER_NAME
from ..io.log import Log
from ..model.errors import RestreamError
from ..model.program import Program

__all__ = ["explain", "Explanation", "StateRead", "FirstDifference", "parse_row", "RowRef"]


@dataclass(frozen=True)
class RowRef:
    """A row as the diff identifies it: table, event (lsn, seq) and n, its rank in the event."""

    table: str
    lsn: int
    seq: int = 0
    n: int = 0

    def __str__(self) -> str:
        return f"{self.table}:{self.lsn}:{self.seq}:{self.n}"


def parse_row(text: str | RowRef) -> RowRef:
    """``TABLE:LSN:SEQ:N`` (or ``TABLE:LSN``, seq and n 0) as a :class:`RowRef`."""
    if isinstance(text, RowRef):
        return text
    parts = str(text).split(":")
    table, numbers = (
        (":".join(parts[:-3]), parts[-3:]) if len(parts) >= 4 else (parts[0], parts[1:])
    )
    try:
        values = [int(x) for x in numbers]
    except ValueError:
        values = []
    if not table or len(values) not in (1, 3):
        raise RestreamError(
            f"row {text!r}: expected TABLE:LSN:SEQ:N as the diff prints it (or TABLE:LSN)"
        )
    return RowRef(table, *values) if len(values) == 3 else RowRef(table, values[0])


@dataclass(frozen=True)
class Write:
    """One write to a traced key: when (event), who (handler, line) and the value after."""

    ts: int
    lsn: int
    seq: int
    handler: str | None  # None: a timed write (at=) coming due
    line: int | None
    value: Any

    @property
    def order(self) -> tuple:
        # A scheduled event at t runs before the log events at t (SPEC section 3).
        return (self.ts, self.seq == 0, self.lsn, self.seq)


@dataclass(frozen=True)
class FirstDifference:
    """The earliest event after which ``state[key]`` differed between the runs."""

    ts: int
    lsn: int
    seq: int
    value: Any
    baseline_value: Any
    writes: tuple[Write, ...]  # at that event, in the run explained
    baseline_writes: tuple[Write, ...]


@dataclass(frozen=True)
class StateRead:
    """A read the emitting run made, with the value the other run had for the same key."""

    state: str
    key: Any
    line: int | None
    value: Any
    baseline_value: Any
    first_difference: FirstDifference | None

    @property
    def differs(self) -> bool:
        return self.value != self.baseline_value


@dataclass
class Explanation:
    """Why one row differs: who emitted it, what it read, where the reads first diverged."""

    row: RowRef
    side: str  # the run that has the row: "a" or "b"
    labels: tuple[str, str]
    handler: str
    line: int | None
    fields: dict[str, Any]
    other_has_row: bool
    reads: list[StateRead] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The causal chain as plain data, for the notebook and ``--json``."""

        def write(w: Write) -> dict:
            return {"ts": w.ts, "lsn": w.lsn, "seq": w.seq, "handler": w.handler, "line": w.line,
                    "value": w.value}  # fmt: skip

        return {
            "row": str(self.row),
            "emitted_by": {
                "run": self.labels[0 if self.side == "a" else 1],
                "handler": self.handler,
                "line": self.line,
            },  # fmt: skip
            "fields": self.fields,
            "other_run_has_row": self.other_has_row,
            "reads": [
                {
                    "state": r.state,
                    "key": r.key,
                    "line": r.line,
                    "value": r.value,
                    "other_value": r.baseline_value,
                    "first_difference": None
                    if r.first_difference is None
                    else {
                        "ts": r.first_difference.ts,
                        "lsn": r.first_difference.lsn,
                        "seq": r.first_difference.seq,
                        "value": r.first_difference.value,
                        "other_value": r.first_difference.baseline_value,
                        "writes": [write(w) for w in r.first_difference.writes],
                        "other_writes": [write(w) for w in r.first_difference.baseline_writes],
                    },
                }  # fmt: skip
                for r in self.reads
            ],
        }

    def text(self) -> str:
        """The causal chain as lines of text (what ``restream diff --explain`` prints)."""
        here, there = self.labels if self.side == "a" else self.labels[::-1]
        where = f" line {self.line}" if self.line else ""
        lines = [
            f"row {self.row} is in {here}"
            + ("" if not self.other_has_row else f" and, with other fields, in {there}")
            + ("" if self.other_has_row else f", not in {there}"),
            f"  emitted by handler {self.handler!r}{where} on lsn {self.row.lsn}"
            + (f" (scheduled event {self.row.seq})" if self.row.seq else "")
            + f": {self.fields}",
        ]
        if not self.reads:
            lines.append("  the handler read no state on that run")
        for r in self.reads:
            at = f" (line {r.line})" if r.line else ""
            mark = "differs" if r.differs else "same"
            lines.append(
                f"  read {r.state}[{r.key!r}]{at}: {r.value!r} in {here}, "
                f"{r.baseline_value!r} in {there} [{mark}]"
            )
            d = r.first_difference
            if d is None:
                continue
            lines.append(
                f"    first differed after lsn {d.lsn}"
                + (f" (scheduled event {d.seq})" if d.seq else "")
                + f" at ts {d.ts}: {d.value!r} in {here}, {d.baseline_value!r} in {there}"
            )
            for label, writes in ((here, d.writes), (there, d.baseline_writes)):
                for w in writes:
                    who = f"handler {w.handler!r}" if w.handler else "a timed write (at=)"
                    lines.append(
                        f"      {label}: {who}"
                        + (f" line {w.line}" if w.line else "")
                        + f" wrote {w.value!r}"
                    )
                if not writes:
                    lines.append(f"      {label}: nothing wrote {r.state}[{r.key!r}] there")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()


# -- tracing replays --------------------------------------------------------------------------


_ABSENT = object()


def _user_line(filename: str) -> int | None:
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return None
        if frame.f_code.co_filename == filename:
            return frame.f_lineno
        frame = frame.f_back
    return None


def _traced_replay(
    program: Program, log: Log, target: RowRef | None, handler: str | None, watch: set
) -> tuple[dict, list, dict]:
    """Replay serially. Returns (reads of ``handler``'s run on the target event, as
    [(state, key, line, value)]; writes to the watched (state, key) pairs; the stores)."""
    from ..runtime import SerialRuntime, flush, run_scheduled

    filename = program.filename
    reads: list = []
    writes: dict[tuple, list[Write]] = {}

    class Runtime(SerialRuntime):
        applying = False

        def apply_due(self, t: int) -> None:
            self.applying = True
            self.due_at = t
            try:
                super().apply_due(t)
            finally:
                self.applying = False

    rt = Runtime()

    def on_target() -> bool:
        ev = rt.event
        return (
            target is not None
            and rt.handler == handler
            and ev is not None
            and ev[0] == target.lsn
            and getattr(ev, "seq", 0) == target.seq
        )

    def make(state: str, default: Any):
        class Traced(dict):
            __slots__ = ()

            def get(self, key, fallback=_ABSENT):
                value = dict.get(self, key, default if fallback is _ABSENT else fallback)
                if not rt.applying and on_target():
                    reads.append((state, key, _user_line(filename), value))
                return value

            def __setitem__(self, key, value):
                dict.__setitem__(self, key, value)
                self._note(key, value)

            def pop(self, key, *fallback):
                out = dict.pop(self, key, *fallback)
                self._note(key, default)
                return out

            def __delitem__(self, key):
                self.pop(key)

            def _note(self, key, value):
                if (state, key) not in watch:
                    return
                ev = rt.event
                if rt.applying:
                    w = Write(rt.due_at, -1, 0, None, None, value)
                else:
                    w = Write(ev[1], ev[0], getattr(ev, "seq", 0), rt.handler,
                              _user_line(filename), value)  # fmt: skip
                writes.setdefault((state, key), []).append(w)

        return Traced()

    stores = {name: make(name, decl.default) for name, decl in program.states.items()}
    by_kind: dict = {}
    compiled = compile_program(
        program,
        rt,
        stores,
        columns=log.columns,
        kind_order=log.kinds_by_frequency(),
        extra_globals={SCHEDULED_RUNNER_NAME: lambda t: run_scheduled(rt, by_kind, t)},
    )
    by_kind.update(compiled.handlers_by_kind())
    for batch in log.iter_events(named=compiled.needs_named_events):
        compiled.run_batch(batch)
    flush(rt, by_kind)
    return {"reads": reads}, writes, rt.rows


def _value_after(trace: list[Write], order: tuple, default: Any) -> Any:
    value = default
    for w in trace:
        if w.order <= order:
            value = w.value
    return value


def _first_difference(
    mine: list[Write], theirs: list[Write], until: tuple, defaults: tuple[Any, Any]
) -> FirstDifference | None:
    moments = sorted({w.order for w in mine + theirs if w.order <= until})
    for moment in moments:
        a = _value_after(mine, moment, defaults[0])
        b = _value_after(theirs, moment, defaults[1])
        if a != b:
            ts, _log, lsn, seq = moment
            return FirstDifference(
                ts,
                lsn,
                seq,
                a,
                b,
                tuple(w for w in mine if w.order == moment),
                tuple(w for w in theirs if w.order == moment),
            )
    return None


def _find_row(rows: dict, ref: RowRef) -> tuple | None:
    n = 0
    for row in rows.get(ref.table, ()):
        lsn, _ts, _handler, seq, _fields = row
        if lsn == ref.lsn and seq == ref.seq:
            if n == ref.n:
                return row
            n += 1
    return None


def _resolve(side: Any, log: Log | None) -> tuple[Program, Log | None, str]:
    """A program (with its run's log when it is a catalog run) and a label."""
    if isinstance(side, Program):
        return side, log, side.name
    text = str(side)
    if "\n" in text or text.endswith(".py") or Path(text).is_file():
        program = Program.load(side)
        return program, log, program.name
    from ..io.catalog import Catalog

    catalog = Catalog()
    record = catalog.latest(text, log_fingerprint=log.fingerprint if log is not None else None)
    record = record or catalog.latest(text)
    if record is None:
        raise RestreamError(f"{text}: not a program file and no run called {text!r} in the catalog")
    source = catalog.program_source(record.run_id)
    program = Program.from_source(source, name=text)
    if log is None:
        import json

        labels = json.loads(catalog.manifest(record.run_id).get("log_sources", "[]"))
        try:
            log = Log(labels if len(labels) != 1 else labels[0])
        except RestreamError as exc:
            raise RestreamError(
                f"run {text!r}: its log ({', '.join(labels)}) cannot be read again ({exc}); "
                "give the log (--log)"
            ) from None
        if log.fingerprint != record.log_fingerprint:
            raise RestreamError(f"run {text!r}: its log has changed since; give the log (--log)")
    return program, log, f"{text} ({record.run_id})"


def explain(
    a: Any,
    b: Any,
    row: str | RowRef,
    *,
    log: Any = None,
    labels: tuple[str, str] | None = None,
) -> Explanation:
    """Why ``row`` differs between run ``a`` (say v2) and run ``b`` (say v1, the baseline).

    ``a`` and ``b`` are run names in the catalog (their programs and log come from it),
    programs (``Program``, a ``.py`` path or source) replayed over ``log``, or a mix. ``row``
    is ``TABLE:LSN:SEQ:N`` as the diff prints it; ``labels`` name the runs in the text. Both programs are replayed serially with
    their state traced, so the values reported are the ones the handlers read.
    """
    ref = parse_row(row)
    log = None if log is None else (log if isinstance(log, Log) else Log(log))
    prog_a, log_a, label_a = _resolve(a, log)
    prog_b, log_b, label_b = _resolve(b, log or log_a)
    log = log or log_a or log_b
    if labels is None and label_a == label_b:
        labels = ("A", "B")
    label_a, label_b = labels or (label_a, label_b)
    if log is None:
        raise RestreamError("explain needs the log the runs replayed (log=...)")
    if log_a is not None and log_b is not None and log_a.fingerprint != log_b.fingerprint:
        raise RestreamError(f"{label_a} and {label_b} replayed different logs: nothing to explain")
    _, _, rows_a = _traced_replay(prog_a, log, None, None, set())
    _, _, rows_b = _traced_replay(prog_b, log, None, None, set())
    found_a, found_b = _find_row(rows_a, ref), _find_row(rows_b, ref)
    if found_a is None and found_b is None:
        raise RestreamError(f"row {ref}: neither {label_a} nor {label_b} emitted it")
    side = "a" if found_a is not None else "b"
    mine, theirs = (prog_a, prog_b) if side == "a" else (prog_b, prog_a)
    found = found_a if side == "a" else found_b
    handler = found[2]
    traced, _, _ = _traced_replay(mine, log, ref, handler, set())
    reads = list(dict.fromkeys((s, k, line, v) for s, k, line, v in traced["reads"]))
    watch = {(s, k) for s, k, _, _ in reads}
    traced_other, writes_other, _ = _traced_replay(theirs, log, ref, handler, watch)
    _, writes_mine, _ = _traced_replay(mine, log, ref, handler, watch)
    other_reads = {(s, k): v for s, k, _, v in traced_other["reads"]}
    until = (found[1], ref.seq == 0, ref.lsn, ref.seq)
    out = []
    for state, key, line, value in reads:
        default_other = theirs.states[state].default if state in theirs.states else None
        if (state, key) in other_reads:
            other = other_reads[(state, key)]
        else:  # the other run made no such read: its value as of the event
            before = (found[1], ref.seq == 0, ref.lsn, ref.seq - 0.5)
            other = _value_after(writes_other.get((state, key), []), before, default_other)
        first = None
        if value != other:
            first = _first_difference(
                writes_mine.get((state, key), []),
                writes_other.get((state, key), []),
                until,
                (mine.states[state].default, default_other),
            )
        out.append(StateRead(state, key, line, value, other, first))
    emit_line = _emit_line(mine, handler, ref.table)
    other_found = found_b if side == "a" else found_a
    return Explanation(
        ref,
        side,
        (label_a, label_b),
        handler,
        emit_line,
        dict(found[4]),
        other_found is not None,
        out,
    )


def _emit_line(program: Program, handler: str, table: str) -> int | None:
    """The line of ``handler``'s ``emit`` to ``table`` (its first such call), if literal."""
    import ast

    for h in program.handlers:
        if h.name != handler:
            continue
        for node in ast.walk(h.node):
            if (
                isinstance(node, ast.Call)
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == table
            ):
                return node.lineno
    return None
