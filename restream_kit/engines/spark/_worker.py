"""What runs inside Spark tasks: handler passes, Python folds, key evaluation, the fallback.

Nothing here imports pyspark: every task is a plain function from Arrow record batches to
Arrow record batches, called by ``mapInArrow``. The program travels as its source text
(:class:`ProgramRef`) and is loaded once per worker process.

A handler pass (:class:`StepTask`) receives, sorted by order key within its partition: the
snapshot rows of the step's own state (the values at the start of the epoch), then, at the
order of the run that made them, pending writes into own state (its own timed writes carried
from earlier epochs, and writes of earlier steps into it), and for every event the resolved
reads of upstream state followed by the event itself. Pending writes wait in a heap and are
applied before the first handler run whose position (time, order, handler) comes after
theirs. It runs the compiled handlers against

- real dicts for own state (state the step reads and writes, which the plan guarantees is
  accessed only by the partition key, or which lives in one partition);
- :class:`AsOfView` for upstream state, refilled before each handler run with exactly the
  values that run may see (resolved by the driver's as-of join);
- :class:`BlindStore` for state the step writes without reading it: each write, merge or
  delete becomes a row at its position, folded later by key;

and writes one output table of tagged rows (see ``OUT_FIELDS``): emitted rows, write rows,
own state's final values, timed writes still pending, errors and timings.

Resolutions that need Python run here too: :class:`FoldTask` folds merges the JVM cannot
(other operators, merge functions), :class:`VectorFoldTask` folds sets and sums with numpy
(the alternative to Spark windows, ``fold="vector"``). :class:`KeysTask` evaluates key
expressions that Spark SQL cannot, and :class:`SerialTask` is the serial fallback.

With ``on_error`` skip or quarantine, a handler run that raises is rolled back inside the
task, as the serial engine does (``serial.GuardedRuntime``): own dicts journal their changes,
and the run's output rows (emits, writes, versions) and timed writes are dropped; a QUAR row
carries the quarantine record to the driver.

Fault injection, for tests of Spark's retries: ``$RESTREAM_FAULT`` in the workers'
environment (see :func:`inject_fault`) kills the Python worker or fails the task in a chosen
stage, partition and attempt.
"""

from __future__ import annotations

import functools
import heapq
import linecache
import operator
import os
import pickle
import signal
import time
from collections import namedtuple
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._compile import compile_program
from ..._poison import event_fields, portable_fields, quarantine_row
from ...errors import RestreamError, user_lineno
from ...program import Program
from ..serial import JOURNAL_ABSENT, JournalDict, TimeTravelError, apply_write
from ._codec import (
    ABSENT,
    BAD,
    BOOL,
    FLOAT,
    INT,
    LONG_MAX,
    LONG_MIN,
    MISSING,
    PICKLE,
    STR,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

__all__ = [
    "ProgramRef",
    "load_program",
    "key_function",
    "FallbackNeeded",
    "FALLBACK_MARKER",
    "StepSpec",
    "StepTask",
    "FoldSpec",
    "FoldTask",
    "VectorFoldSpec",
    "VectorFoldTask",
    "KeysSpec",
    "KeysTask",
    "SerialSpec",
    "SerialTask",
    "SERIAL_FIELDS",
    "AsOfView",
    "BlindStore",
    "OUT_FIELDS",
    "OUT_SCHEMA",
    "RES_FIELDS",
    "RES_SCHEMA",
    "EMIT",
    "WRITE",
    "FINAL",
    "PEND",
    "ERROR",
    "STAT",
    "LAST",
    "RESOLVED",
    "OP_REQ",
    "OP_SET",
    "OP_DEL",
    "OP_ADD",
    "OP_BIN",
    "OP_FN",
    "TAG_SNAP",
    "TAG_PEND",
    "TAG_READ",
    "TAG_EVENT",
    "event_type",
    "pickle_error",
    "unpickle_error",
    "QUAR",
    "FAULT_ENV",
    "FAULT_LOG_ENV",
    "inject_fault",
]

FALLBACK_MARKER = "RESTREAM_FALLBACK"

# Output row kinds (QUAR: a handler run rolled back under on_error skip or quarantine).
EMIT, WRITE, FINAL, PEND, ERROR, STAT, LAST, RESOLVED, QUAR = range(1, 10)
# Write operations (and the request rows of an as-of resolution).
OP_REQ, OP_SET, OP_DEL, OP_ADD, OP_BIN, OP_FN = range(6)
# Input row tags of a handler pass, in the order they sort.
TAG_SNAP, TAG_PEND, TAG_READ, TAG_EVENT = range(4)

#: Columns of a handler pass's output (and of the rows collected to the driver).
OUT_FIELDS = (
    ("_rs_kind", pa.int8(), "byte"),
    ("_rs_s", pa.int32(), "int"),
    ("_rs_k", pa.string(), "string"),
    ("_rs_t", pa.int64(), "long"),
    ("_rs_o", pa.int64(), "long"),
    ("_rs_h", pa.int32(), "int"),
    ("_rs_i", pa.int64(), "long"),
    ("_rs_op", pa.int8(), "byte"),
    ("_rs_vt", pa.int8(), "byte"),
    ("_rs_vl", pa.int64(), "long"),
    ("_rs_vd", pa.float64(), "double"),
    ("_rs_vb", pa.binary(), "binary"),
    ("_rs_name", pa.string(), "string"),
    ("_rs_pk", pa.string(), "string"),
)
OUT_SCHEMA = pa.schema([(n, t) for n, t, _ in OUT_FIELDS])

#: Columns of a resolution's output: answers to requests, and each key's last value.
RES_FIELDS = (
    ("_rs_kind", pa.int8(), "byte"),
    ("_rs_s", pa.int32(), "int"),
    ("_rs_k", pa.string(), "string"),
    ("_rs_o", pa.int64(), "long"),
    ("_rs_h", pa.int32(), "int"),
    ("_rs_step", pa.int32(), "int"),
    ("_rs_pk", pa.string(), "string"),
    ("_rs_vt", pa.int8(), "byte"),
    ("_rs_vl", pa.int64(), "long"),
    ("_rs_vd", pa.float64(), "double"),
    ("_rs_vb", pa.binary(), "binary"),
    ("_rs_last", pa.bool_(), "boolean"),
)
RES_SCHEMA = pa.schema([(n, t) for n, t, _ in RES_FIELDS])

_BATCH_ROWS = 20_000


class FallbackNeeded(BaseException):
    """The parallel path met something it cannot do exactly; the replay reruns serially.

    A BaseException, so that a handler's ``except Exception`` cannot swallow it.
    """

    def __init__(self, reason: str):
        super().__init__(f"{FALLBACK_MARKER}[{reason}]")
        self.reason = reason


# -- fault injection ---------------------------------------------------------------------------

#: Faults to inject, separated by ``;``, each ``ACTION:key=value:...``. ACTION is ``kill``
#: (SIGKILL the Python worker running the task), ``fail`` (raise in the task) or ``sleep``
#: (``seconds=N``, a straggler for speculation). Keys choose the task: ``stage`` (a step's
#: name or one of its handlers, ``serial`` for the fallback, ``fold``, ``keys``; default every
#: stage), ``partition`` (default every partition) and ``attempt`` (default 0, the first
#: attempt only, so that Spark's retry recovers; ``*`` every attempt). Example:
#: ``RESTREAM_FAULT="kill:stage=flag:partition=0"``.
FAULT_ENV = "RESTREAM_FAULT"
#: When set, a file that every injected fault appends a line to before it strikes.
FAULT_LOG_ENV = "RESTREAM_FAULT_LOG"


def _faults(text: str) -> list[tuple[str, dict[str, str]]]:
    faults = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        action, *pairs = item.split(":")
        where = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
        if action not in ("kill", "fail", "sleep"):
            raise ValueError(f"{FAULT_ENV}: unknown fault {action!r} (kill, fail or sleep)")
        faults.append((action, where))
    return faults


def inject_fault(stage: str) -> None:
    """Strike the faults of ``$RESTREAM_FAULT`` that match this task (tests of retries only).

    Read in the worker's own environment, which in local mode is the driver's at the time
    the JVM started, and elsewhere comes from ``spark.executorEnv.RESTREAM_FAULT``.
    """
    text = os.environ.get(FAULT_ENV)
    if not text:
        return
    from pyspark import TaskContext  # only when faults are asked for

    ctx = TaskContext.get()
    if ctx is None:
        return
    parts, attempt = ctx.partitionId(), ctx.attemptNumber()
    for action, where in _faults(text):
        wanted = where.get("stage", "*")
        if wanted != "*" and wanted != stage and wanted not in stage.split(", "):
            continue
        if where.get("partition", "*") not in ("*", str(parts)):
            continue
        if where.get("attempt", "0") not in ("*", str(attempt)):
            continue
        note = f"{action} stage={stage} partition={parts} attempt={attempt} pid={os.getpid()}"
        log = os.environ.get(FAULT_LOG_ENV)
        if log:
            with open(log, "a") as f:
                f.write(note + "\n")
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "fail":
            raise RuntimeError(f"injected fault: {note}")
        else:
            time.sleep(float(where.get("seconds", "5")))


# -- the program on the worker ------------------------------------------------------------


@dataclass(frozen=True)
class ProgramRef:
    """A program as it travels to the workers: its source text, file name and name."""

    source: str
    filename: str
    name: str
    sha256: str

    @classmethod
    def of(cls, program: Program) -> ProgramRef:
        return cls(program.source, program.filename, program.name, program.sha256)


_PROGRAMS: dict[tuple[str, str], Program] = {}
_EVENT_TYPES: dict[tuple[str, ...], type] = {}


def load_program(ref: ProgramRef) -> Program:
    """The program of ``ref``, loaded once per worker process."""
    key = (ref.sha256, ref.filename)
    program = _PROGRAMS.get(key)
    if program is None:
        program = Program(ref.source, ref.filename, ref.name)
        _PROGRAMS[key] = program
    return program


def event_type(columns: tuple[str, ...]) -> type:
    """The named tuple type of events with ``columns`` (the same as ``Log.event_type``)."""
    cls = _EVENT_TYPES.get(columns)
    if cls is None:
        cls = _EVENT_TYPES[columns] = namedtuple("Event", columns, rename=True)
    return cls


def key_function(expr: str, program: Program) -> Any:
    """A key expression over the event ``e`` as a function, in a fresh copy of the program's
    module namespace (the planner's ``compile_key``, without importing the planner)."""
    namespace: dict[str, Any] = {
        "__name__": f"restream_keys_{program.name}",
        "__file__": program.filename,
    }
    exec(compile(program.module_ast, program.filename, "exec"), namespace)
    return eval(compile(f"lambda e: ({expr})", f"<key of {program.name}>", "eval"), namespace)


def _column_values(batch: pa.RecordBatch, name: str, pickled: bool) -> list:
    values = batch.column(name).to_pylist()
    if pickled:
        return [None if v is None else pickle.loads(v) for v in values]
    return values


# -- output ---------------------------------------------------------------------------------


class _Out:
    """Output rows as tuples in the order of ``fields``, flushed as record batches."""

    def __init__(self, fields: tuple = OUT_FIELDS):
        self.fields = fields
        self.schema = pa.schema([(n, t) for n, t, _ in fields])
        self.names = [n for n, _, _ in fields]
        self.rows: list[tuple] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, **values: Any) -> None:
        self.rows.append(tuple(values.get(n) for n in self.names))

    def batch(self) -> pa.RecordBatch:
        rows = self.rows
        self.rows = []
        cols = list(zip(*rows)) if rows else [()] * len(self.fields)
        arrays = [pa.array(col, type=t) for col, (_, t, _) in zip(cols, self.fields)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def flush(self, force: bool = False) -> Iterator[pa.RecordBatch]:
        if len(self.rows) >= _BATCH_ROWS or (force and self.rows):
            yield self.batch()


class _OutRows(_Out):
    """The handler pass's output (``OUT_FIELDS``) with a positional appender."""

    def __init__(self) -> None:
        super().__init__(OUT_FIELDS)

    def write(self, kind, s, k, t, o, h, i, op, value_cols, name=None, pk=None) -> None:
        vt, vl, vd, vb = value_cols
        self.rows.append((kind, s, k, t, o, h, i, op, vt, vl, vd, vb, name, pk))


_NO_VALUE = (ABSENT, None, None, None)


def _encode_value(value: Any) -> tuple:
    """``encode_value``, falling back when the value cannot be pickled: whether that is an
    error is for the serial algorithm to say (it checks the final state, not each write)."""
    try:
        return encode_value(value)
    except Exception as exc:  # noqa: BLE001 - pickling can raise almost anything
        raise FallbackNeeded(f"a state value cannot be pickled ({type(exc).__name__})") from None


def _pickled_fields(fields: dict) -> bytes:
    """Emitted fields as bytes; the serial algorithm names fields that cannot travel."""
    try:
        return pickle.dumps(fields, protocol=5)
    except Exception as exc:  # noqa: BLE001
        raise FallbackNeeded(f"an emitted value cannot be pickled ({type(exc).__name__})") from None


# -- stores -----------------------------------------------------------------------------------


class _Unrequested:
    __slots__ = ()


_UNREQUESTED = _Unrequested()
_EMPTY: dict = {}


class AsOfView:
    """Upstream state as one handler run may see it: the values its reads resolved to.

    A read of a key that was not resolved for this run means the plan missed a read: the
    replay falls back rather than guess.
    """

    __slots__ = ("state", "cur")

    def __init__(self, state: str):
        self.state = state
        self.cur: dict = _EMPTY

    def get(self, key: Any, default: Any = None) -> Any:
        value = self.cur.get(key, _UNREQUESTED)
        if value is MISSING:
            return default
        if value is _UNREQUESTED:
            raise FallbackNeeded(f"read of {self.state}[{key!r}] was not resolved in advance")
        return value

    def __contains__(self, key: Any) -> bool:
        value = self.cur.get(key, _UNREQUESTED)
        if value is _UNREQUESTED:
            raise FallbackNeeded(f"read of {self.state}[{key!r}] was not resolved in advance")
        return value is not MISSING

    def _whole(self, *_args: Any, **_kwargs: Any) -> Any:
        raise FallbackNeeded(f"{self.state} used whole where only keyed reads were planned")

    __getitem__ = __iter__ = __len__ = keys = values = items = _whole
    __setitem__ = __delitem__ = pop = _whole


class _Forbidden:
    """State this step neither reads nor writes according to the plan."""

    __slots__ = ("state",)

    def __init__(self, state: str):
        self.state = state

    def _use(self, *_args: Any, **_kwargs: Any) -> Any:
        raise FallbackNeeded(f"{self.state} is used by a step the plan says does not use it")

    get = __contains__ = __getitem__ = __iter__ = __len__ = keys = values = items = _use
    __setitem__ = __delitem__ = pop = _use


class _RecordingDict(dict):
    """Own state that a later step reads: every change also becomes a version row."""

    __slots__ = ("rt", "sid")

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self.rt.version(self.sid, key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        out = dict.pop(self, key, *default)
        self.rt.version(self.sid, key, MISSING)
        return out

    def __delitem__(self, key: Any) -> None:
        dict.__delitem__(self, key)
        self.rt.version(self.sid, key, MISSING)


class _JournalRecordingDict(_RecordingDict):
    """A :class:`_RecordingDict` that also journals (key, old value) for a rollback."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        self.rt.journal.append((self, key, dict.get(self, key, JOURNAL_ABSENT)))
        _RecordingDict.__setitem__(self, key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        self.rt.journal.append((self, key, dict.get(self, key, JOURNAL_ABSENT)))
        return _RecordingDict.pop(self, key, *default)

    def __delitem__(self, key: Any) -> None:
        self.pop(key)


_BINOPS = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
    "lshift": operator.lshift,
    "rshift": operator.rshift,
    "or": operator.or_,
    "and": operator.and_,
    "xor": operator.xor,
    "matmul": operator.matmul,
}


class _Delta:
    """``old <op> operand`` waiting to be stored into the key it was read from."""

    __slots__ = ("hole", "op", "operand")

    def __init__(self, hole: _Hole, op: str, operand: Any):
        self.hole = hole
        self.op = op
        self.operand = operand

    def __reduce__(self) -> Any:
        raise FallbackNeeded("a blind merge's intermediate value escaped")


def _binop_with(fn: Any, operand: Any, old: Any) -> Any:
    return fn(old, operand)


def _binop(name: str):
    def method(self: _Hole, other: Any) -> _Delta:
        return _Delta(self, name, other)

    return method


def _hole_misuse(self: _Hole, *_args: Any) -> Any:
    raise FallbackNeeded(f"{self.store.state} is read where the plan says it is only merged")


class _Hole:
    """What ``m.get(k, default)`` returns for a state the step only merges into."""

    __slots__ = ("store", "key")

    def __init__(self, store: BlindStore, key: Any):
        self.store = store
        self.key = key

    __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = _hole_misuse
    __str__ = __repr__ = __format__ = __int__ = __float__ = __index__ = _hole_misuse
    __len__ = __iter__ = __reduce__ = __getattr__ = __radd__ = __rsub__ = _hole_misuse


for _name in _BINOPS:
    setattr(_Hole, f"__{_name}__", _binop(_name))


class BlindStore:
    """State a step writes without reading: writes become rows at their positions.

    ``path`` says how the rows are folded (see ``_layout``): in the JVM, ``set`` takes only
    overwrites and deletes, ``add`` only additions of ints and floats, ``sum`` both;
    ``python`` keeps each operation (pickled) for a fold in Python.
    """

    __slots__ = ("rt", "sid", "state", "path", "route")

    def __init__(self, rt: _TaskRuntime, sid: int, state: str, path: str, route: Any = False):
        self.rt = rt
        self.sid = sid
        self.state = state
        self.path = path
        # Where a later stage that owns this state keeps a key: False (one partition, or
        # nobody owns it), None (the key is the partition key) or the key's element index.
        self.route = route

    def get(self, key: Any, _default: Any = None) -> _Hole:
        return _Hole(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        if type(value) is _Delta:
            if value.hole.store is not self:
                raise FallbackNeeded(f"a merge into {self.state} mixed two states")
            self.record(value.op, key, value.operand, None)
        else:
            self.record("set", key, value, None)

    def pop(self, key: Any, _default: Any = None) -> None:
        self.record("delete", key, None, None)

    def record(self, op: str, key: Any, arg: Any, at: int | None) -> None:
        rt = self.rt
        t = rt.ts if at is None else at
        path = self.path
        if op == "set" or op == "delete":
            if path == "add":
                raise FallbackNeeded(f"{self.state} was planned as {path} but gets {op}")
            if op == "set":
                code = OP_SET
                vt, vl, vd, vb = _encode_value(arg)
            else:
                code, vt, vl, vd, vb = OP_DEL, ABSENT, None, None, None
        elif path != "python":
            if op not in ("add", "sub") or path == "set":
                raise FallbackNeeded(f"{self.state} was planned as {self.path} but gets {op}")
            code = OP_ADD
            if type(arg) is int and LONG_MIN < arg <= LONG_MAX:
                vt, vl, vd, vb = INT, (-arg if op == "sub" else arg), None, None
            else:
                vt, vl, vd, vb = _number(arg, op == "sub", self.state)
        elif op == "merge":
            from pyspark import cloudpickle  # only where a function must travel

            code, vt, vl, vd = OP_FN, ABSENT, None, None
            vb = cloudpickle.dumps(arg)
        else:
            code, vt, vl, vd = OP_BIN, ABSENT, None, None
            vb = pickle.dumps((op, arg), protocol=5)
        rt.i += 1
        route = self.route
        if route is False:
            pk = None
        elif route is None:
            pk = encode_key(key)
        elif type(key) is tuple and len(key) > route:
            pk = encode_key(key[route])
        else:
            raise FallbackNeeded(f"key {key!r} of {self.state} does not hold its partition key")
        rt.out.rows.append(
            (WRITE, self.sid, encode_key(key), t, rt.o, rt.h, rt.i, code, vt, vl, vd, vb,
             None, pk)
        )  # fmt: skip

    def _use(self, *_args: Any, **_kwargs: Any) -> Any:
        raise FallbackNeeded(f"{self.state} is read where the plan says it is only written")

    __contains__ = __getitem__ = __iter__ = __len__ = keys = values = items = _use

    def __delitem__(self, key: Any) -> None:
        self.pop(key)


_KEYS: dict[str, Any] = {}


def _decode_keys(texts: list) -> list:
    """Decode keys, through a cache of this worker process (keys repeat a lot)."""
    cache = _KEYS
    if len(cache) > 2_000_000:
        cache.clear()
    out = []
    for text in texts:
        key = cache.get(text, _UNREQUESTED)
        if key is _UNREQUESTED:
            key = cache[text] = decode_key(text)
        out.append(key)
    return out


def _decode_values(vts: list, vls: list, vds: list, vbs: list) -> list:
    return [
        vl if vt == INT else decode_value(vt, vl, vd, vb)
        for vt, vl, vd, vb in zip(vts, vls, vds, vbs)
    ]


def _number(value: Any, negate: bool, state: str) -> tuple:
    t = type(value)
    if t is int or t is bool:
        value = -int(value) if negate else int(value)
        if LONG_MIN <= value <= LONG_MAX:
            return INT, value, None, None
    elif t is float:
        return FLOAT, None, (-value if negate else value), None
    raise FallbackNeeded(f"{state} was planned as a sum but gets {value!r}")


# -- the runtime of a handler pass -----------------------------------------------------------


class _TaskRuntime:
    """What compiled handlers call inside a task (the serial runtime's counterpart)."""

    def __init__(self, out: _OutRows, heap_bound: int | None):
        self.out = out
        self.event: Any = None
        self.ts = 0
        self.o = 0
        self.h = 0
        self.handler = ""
        self.seq = 0
        self.i = 0
        self.heap: list = []
        self.bound = heap_bound
        # Position of version rows made now: None means (ts, o, h, next i).
        self.fixed: tuple[int, int, int, int] | None = None
        # Changes of own dicts in the current handler run (on_error skip or quarantine).
        self.journal: list = []
        self.columns: tuple[str, ...] = ()

    def next_i(self) -> int:
        self.i += 1
        return self.i

    # Called by compiled handlers ----------------------------------------------------

    def write(self, d: Any, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None:
        now = self.ts
        if at is not None and at < now:
            raise TimeTravelError(f"write at {at} is earlier than the event's time {now}")
        if type(d) is BlindStore:
            d.record(op, key, arg, None if at is None or at == now else at)
            return
        if type(d) is not dict and type(d) is not _RecordingDict:
            d._use()  # an AsOfView or a forbidden store: the plan was wrong
        if at is None or at == now:
            apply_write(d, default, op, key, arg)
            return
        heapq.heappush(self.heap, (at, self.o, self.h, self.next_i(), d, default, op, key, arg))

    def emit(self, table: str, **fields: Any) -> None:
        self.i += 1
        self.out.rows.append(
            (EMIT, None, None, None, self.o, self.h, self.i, None, None, None, None,
             _pickled_fields(fields), table, None)
        )  # fmt: skip

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None:
        raise FallbackNeeded("schedule() runs only in the serial fallback")

    # Versions of own state ----------------------------------------------------------

    def version(self, sid: int, key: Any, value: Any) -> None:
        fixed = self.fixed
        if fixed is None:
            t, o, h, i = self.ts, self.o, self.h, self.next_i()
        else:
            t, o, h, i = fixed
        op = OP_DEL if value is MISSING else OP_SET
        self.out.write(WRITE, sid, encode_key(key), t, o, h, i, op, _encode_value(value))

    def apply_due(self, t: int) -> None:
        """Apply pending writes with time <= ``t`` in position order (end of an epoch)."""
        heap = self.heap
        while heap and heap[0][0] <= t:
            self._apply(heapq.heappop(heap))

    def apply_before(self, t: int, o: int, h: int) -> None:
        """Apply pending writes positioned before the run (t, o, h): timed writes that are
        due, and writes of upstream stages into own state."""
        heap = self.heap
        while heap and heap[0] < (t, o, h):
            self._apply(heapq.heappop(heap))

    def _apply(self, entry: tuple) -> None:
        at, o, h, i, d, default, op, key, arg = entry
        self.fixed = (at, o, h, i)
        try:
            apply_write(d, default, op, key, arg)
        finally:
            self.fixed = None


# -- the handler pass ------------------------------------------------------------------------


@dataclass(frozen=True)
class StepSpec:
    """Everything a handler pass needs to know, as plain data."""

    program: ProgramRef
    step: str
    columns: tuple[str, ...]
    pickled_columns: frozenset[str]
    handlers: tuple[tuple[int, str, tuple[str, ...]], ...]  # (index, name, kinds)
    state_ids: dict[str, int]
    own: dict[str, bool]  # own state -> whether its versions are recorded
    upstream: tuple[str, ...]
    blind: dict[str, str]  # blind state -> set | add | sum | python
    unwritten: tuple[str, ...]
    bound: int  # timed writes with at <= bound are due by the end of the epoch
    own_key_part: dict[str, int | None] = field(default_factory=dict)
    partitioned: bool = False
    route: dict[str, int | None] = field(default_factory=dict)
    on_error: str = "stop"


class StepTask:
    """``mapInArrow`` function of one handler pass (see the module docstring)."""

    def __init__(self, spec: StepSpec):
        self.spec = spec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        spec = self.spec
        inject_fault(spec.step)
        started = time.perf_counter()
        program = load_program(spec.program)
        out = _OutRows()
        rt = _TaskRuntime(out, spec.bound)
        guarded = spec.on_error != "stop"
        rt.columns = spec.columns  # the log's names, for errors (the event type renames)
        stores: dict[str, Any] = {}
        views: dict[int, AsOfView] = {}
        sid_of = spec.state_ids
        names = {sid: name for name, sid in sid_of.items()}
        for name in program.states:
            if name in spec.own:
                if spec.own[name]:
                    d = _JournalRecordingDict() if guarded else _RecordingDict()
                    d.rt = rt
                    d.sid = sid_of[name]
                else:
                    d = JournalDict(rt.journal) if guarded else {}
                stores[name] = d
            elif name in spec.upstream:
                stores[name] = views[sid_of[name]] = AsOfView(name)
            elif name in spec.blind:
                stores[name] = BlindStore(
                    rt, sid_of[name], name, spec.blind[name], spec.route.get(name, False)
                )
            elif name in spec.unwritten:
                stores[name] = {}
            else:
                stores[name] = _Forbidden(name)
        compiled = compile_program(program, rt, stores)
        fns = dict(compiled.handlers)
        by_kind: dict[str, list[tuple[int, str, Any]]] = {}
        for index, name, kinds in spec.handlers:
            for kind in kinds:
                by_kind.setdefault(kind, []).append((index, name, fns[name]))
        make = event_type(spec.columns)
        new_event = tuple.__new__
        events_done = 0
        seen_pk: set = set()
        failed = False
        view_list = list(views.items())
        # Resolved reads not yet matched with their event: orders, handlers, states, keys,
        # values (a read always comes before its event, maybe in an earlier batch).
        p_o = np.empty(0, dtype=np.int64)
        p_h: list = []
        p_s: list = []
        p_k: list = []
        p_v: list = []
        for batch in batches:
            if failed:
                continue
            tags = batch.column("_rs_tag")
            if pc.any(pc.less(tags, TAG_READ)).as_py():
                self._load(batch, rt, stores, names, program)
                if spec.partitioned:
                    loaded = batch.filter(pc.less(tags, TAG_READ))
                    seen_pk.update(loaded.column("_rs_pk").to_pylist())
            read_mask = pc.equal(tags, TAG_READ)
            if pc.any(read_mask).as_py():
                rb = batch.filter(read_mask)
                vts = rb.column("_rs_vt").to_pylist()
                if BAD in vts:
                    raise FallbackNeeded("a merged value could not be folded in the JVM")
                p_o = np.concatenate([p_o, rb.column("_rs_o").to_numpy()])
                p_h += rb.column("_rs_h").to_pylist()
                p_s += rb.column("_rs_s").to_pylist()
                p_k += _decode_keys(rb.column("_rs_k").to_pylist())
                p_v += _decode_values(
                    vts,
                    rb.column("_rs_vl").to_pylist(),
                    rb.column("_rs_vd").to_pylist(),
                    rb.column("_rs_vb").to_pylist(),
                )
            event_mask = pc.equal(tags, TAG_EVENT)
            if not pc.any(event_mask).as_py():
                continue
            eb = batch if pc.all(event_mask).as_py() else batch.filter(event_mask)
            e_o = eb.column("_rs_o").to_numpy()
            orders = e_o.tolist()
            if len(p_o):
                starts = np.searchsorted(p_o, e_o, "left").tolist()
                ends = np.searchsorted(p_o, e_o, "right").tolist()
            else:
                starts = ends = [0] * len(orders)
            if spec.partitioned:
                seen_pk.update(eb.column("_rs_pk").to_pylist())
            cols = [_column_values(eb, c, c in spec.pickled_columns) for c in spec.columns]
            for o, row, a, b in zip(orders, zip(*cols), starts, ends):
                ev = new_event(make, row)
                if b > a:
                    fills: dict = {}
                    for j in range(a, b):
                        per = fills.get(p_s[j])
                        if per is None:
                            per = fills[p_s[j]] = {}
                        d = per.get(p_h[j])
                        if d is None:
                            d = per[p_h[j]] = {}
                        d[p_k[j]] = p_v[j]
                else:
                    fills = _EMPTY
                ts = ev[1]
                rt.event = ev
                rt.ts = ts
                rt.o = o
                heap = rt.heap
                for index, name, fn in by_kind.get(ev[2], ()):
                    if heap and heap[0][0] <= ts:
                        rt.apply_before(ts, o, index)
                    rt.h = index
                    rt.handler = name
                    for sid, view in view_list:
                        per = fills.get(sid)
                        view.cur = per.get(index, _EMPTY) if per else _EMPTY
                    if guarded:
                        rt.journal.clear()
                        mark, mark_i = len(out.rows), rt.i
                    try:
                        fn(ev)
                    except FallbackNeeded:
                        raise
                    except Exception as exc:  # noqa: BLE001 - reported as the replay's error
                        if guarded:
                            self._rollback(rt, out, mark, mark_i)
                            self._quarantine(out, program, rt, spec.columns, exc)
                            continue
                        self._error(out, program, rt, exc)
                        failed = True
                        break
                if failed:
                    break
                events_done += 1
            if len(p_o):
                rest = ends[-1]
                p_o = p_o[rest:]
                p_h, p_s, p_k, p_v = p_h[rest:], p_s[rest:], p_k[rest:], p_v[rest:]
            yield from out.flush()
        if not failed:
            bound = spec.bound
            try:
                rt.apply_due(bound)
            except Exception as exc:  # noqa: BLE001 - a merge function that raises
                self._error(out, program, rt, exc)
            for name in spec.own:
                sid = sid_of[name]
                part = spec.own_key_part.get(name)
                for key, value in stores[name].items():
                    pk = self._pk(spec, seen_pk, name, part, key)
                    out.write(
                        FINAL, sid, encode_key(key), None, None, None, None, None,
                        _encode_value(value), pk=pk,
                    )  # fmt: skip
            for at, o, h, i, d, _default, op, key, arg in rt.heap:
                name = next(n for n, store in stores.items() if store is d)
                pk = self._pk(spec, seen_pk, name, spec.own_key_part.get(name), key)
                self._pending(out, sid_of[name], at, o, h, i, op, key, arg, pk)
        out.add(
            _rs_kind=STAT,
            _rs_name=spec.step,
            _rs_vd=time.perf_counter() - started,
            _rs_vl=events_done,
        )
        yield from out.flush(force=True)

    @staticmethod
    def _load(
        batch: pa.RecordBatch, rt: _TaskRuntime, stores: dict, names: dict, program: Program
    ) -> None:
        """Snapshot rows fill own dicts; pending rows go back into the timed-write heap."""
        rows = batch.filter(pc.less(batch.column("_rs_tag"), TAG_READ))
        cols = [
            rows.column(c).to_pylist()
            for c in (
                "_rs_tag", "_rs_s", "_rs_k", "_rs_vt", "_rs_vl", "_rs_vd", "_rs_vb",
                "_rs_t", "_rs_wo", "_rs_h", "_rs_i", "_rs_op",
            )
        ]  # fmt: skip
        for tag, s, k, vt, vl, vd, vb, t, wo, h, i, op in zip(*cols):
            state = names[s]
            d = stores[state]
            key = decode_key(k)
            if tag == TAG_SNAP:
                dict.__setitem__(d, key, decode_value(vt, vl, vd, vb))
                continue
            if op == OP_FN:
                arg, name = pickle.loads(vb), "merge"
            elif op == OP_BIN:
                binop, operand = pickle.loads(vb)
                arg, name = functools.partial(_binop_with, _BINOPS[binop], operand), "merge"
            elif op == OP_DEL:
                arg, name = None, "delete"
            else:
                arg = decode_value(vt, vl, vd, vb)
                name = "set" if op == OP_SET else "add"
            default = program.states[state].default
            heapq.heappush(rt.heap, (t, wo, h, i, d, default, name, key, arg))

    @staticmethod
    def _pk(spec: StepSpec, seen: set, state: str, part: int | None, key: Any) -> str | None:
        """The partition key of an own state's key, checked against this partition's."""
        if not spec.partitioned:
            return None
        if part is None:
            pk = encode_key(key)
        elif type(key) is tuple and len(key) > part:
            pk = encode_key(key[part])
        else:
            raise FallbackNeeded(f"key {key!r} of {state} does not hold the partition key")
        if pk not in seen:
            raise FallbackNeeded(f"key {key!r} of {state} is outside its partition")
        return pk

    @staticmethod
    def _pending(out, sid, at, o, h, i, op, key, arg, pk) -> None:
        if op == "merge":
            from pyspark import cloudpickle

            code, value = OP_FN, (ABSENT, None, None, cloudpickle.dumps(arg))
        elif op == "delete":
            code, value = OP_DEL, _NO_VALUE
        else:
            code, value = (OP_SET if op == "set" else OP_ADD), _encode_value(arg)
        out.write(PEND, sid, encode_key(key), at, o, h, i, code, value, pk=pk)

    @staticmethod
    def _rollback(rt: _TaskRuntime, out: _OutRows, mark: int, mark_i: int) -> None:
        """Undo the current handler run: its output rows, own dict changes, timed writes."""
        del out.rows[mark:]
        journal = rt.journal
        while journal:
            d, key, old = journal.pop()
            if old is JOURNAL_ABSENT:
                dict.pop(d, key, None)
            else:
                dict.__setitem__(d, key, old)
        o, h = rt.o, rt.h
        heap = rt.heap
        kept = [e for e in heap if not (e[1] == o and e[2] == h and e[3] > mark_i)]
        if len(kept) != len(heap):
            heap[:] = kept
            heapq.heapify(heap)
        rt.i = mark_i

    @staticmethod
    def _quarantine(out, program: Program, rt: _TaskRuntime, columns, exc: BaseException) -> None:
        row = quarantine_row(
            filename=program.filename,
            handler=rt.handler,
            event=rt.event,
            seq=0,
            columns=columns,
            exc=exc,
        )
        out.add(_rs_kind=QUAR, _rs_o=rt.o, _rs_h=rt.h, _rs_vb=pickle.dumps(row, protocol=5))

    @staticmethod
    def _error(out: _OutRows, program: Program, rt: _TaskRuntime, exc: BaseException) -> None:
        out.add(
            _rs_kind=ERROR,
            _rs_o=rt.o,
            _rs_h=rt.h,
            _rs_vb=pickle_error(program, rt, exc),
        )


# -- errors -------------------------------------------------------------------------------------


def pickle_error(program: Program, rt: Any, exc: BaseException) -> bytes:
    """What the driver needs to raise the serial engine's error for ``exc``."""
    lineno = user_lineno(exc, program.filename)
    ev = rt.event
    info = {
        "handler": rt.handler,
        "lineno": lineno,
        "line": linecache.getline(program.filename, lineno) if lineno else None,
        "lsn": ev[0] if ev is not None else None,
        "kind": ev[2] if ev is not None else None,
        "ts": ev[1] if ev is not None else None,
        "type": type(exc).__name__,
        "message": str(exc),
        "passthrough": isinstance(exc, RestreamError) and not isinstance(exc, TimeTravelError),
        "fields": None
        if ev is None
        else portable_fields(event_fields(ev, getattr(rt, "columns", None))),
    }
    try:
        info["exc"] = pickle.dumps(exc, protocol=5)
        pickle.loads(info["exc"])
    except Exception:  # noqa: BLE001 - an exception that does not travel is described instead
        info["exc"] = None
    return pickle.dumps(info, protocol=5)


def unpickle_error(data: bytes) -> tuple[dict, BaseException]:
    """The error info of :func:`pickle_error` and the exception, rebuilt where possible."""
    info = pickle.loads(data)
    exc = None
    if info.get("exc") is not None:
        try:
            exc = pickle.loads(info["exc"])
        except Exception:  # noqa: BLE001
            exc = None
    if exc is None:
        exc = type(info["type"], (Exception,), {})(info["message"])
    return info, exc


# -- the Python fold of merges (an as-of resolution in Python) ------------------------------------


@dataclass(frozen=True)
class FoldSpec:
    """A Python resolution: the states' defaults (pickled) and whether to emit LAST rows."""

    defaults: dict[int, bytes]
    last: bool = True


class FoldTask:
    """Resolve requests against rows of writes by folding them per key in Python.

    Input: rows of (state, key) sorted by position within partitions: snapshot rows, write
    rows (set, delete, add, other binary operations, merge functions) and request rows. For
    each request, the value of the key at its position; for each key, its last value.
    """

    def __init__(self, spec: FoldSpec):
        self.spec = spec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        inject_fault("fold")
        defaults = {s: pickle.loads(d) for s, d in self.spec.defaults.items()}
        out = _Out(RES_FIELDS)
        cur_s = cur_k = None
        value: Any = MISSING
        for batch in batches:
            cols = [
                batch.column(c).to_pylist()
                for c in (
                    "_rs_s", "_rs_k", "_rs_op", "_rs_vt", "_rs_vl", "_rs_vd", "_rs_vb",
                    "_rs_o", "_rs_h", "_rs_step", "_rs_pk",
                )
            ]  # fmt: skip
            for s, k, op, vt, vl, vd, vb, o, h, step, pk in zip(*cols):
                if s != cur_s or k != cur_k:
                    if cur_s is not None and self.spec.last:
                        out.add(
                            _rs_kind=LAST, _rs_s=cur_s, _rs_k=cur_k, _rs_last=True, **_vcols(value)
                        )
                    cur_s, cur_k, value = s, k, MISSING
                if op == OP_REQ:
                    out.add(
                        _rs_kind=RESOLVED, _rs_s=s, _rs_k=k, _rs_o=o, _rs_h=h, _rs_step=step,
                        _rs_pk=pk, **_vcols(value),
                    )  # fmt: skip
                    continue
                try:
                    value = _apply(op, value, defaults.get(s), vt, vl, vd, vb)
                except FallbackNeeded:
                    raise
                except Exception as exc:  # noqa: BLE001 - the serial rerun names the handler
                    raise FallbackNeeded(f"a merge raised {type(exc).__name__}: {exc}") from None
            yield from out.flush()
        if cur_s is not None and self.spec.last:
            out.add(_rs_kind=LAST, _rs_s=cur_s, _rs_k=cur_k, _rs_last=True, **_vcols(value))
        yield from out.flush(force=True)


def _vcols(value: Any) -> dict:
    vt, vl, vd, vb = _encode_value(value)
    return {"_rs_vt": vt, "_rs_vl": vl, "_rs_vd": vd, "_rs_vb": vb}


def _apply(op: int, value: Any, default: Any, vt, vl, vd, vb) -> Any:
    if op == OP_SET:
        return decode_value(vt, vl, vd, vb)
    if op == OP_DEL:
        return MISSING
    old = default if value is MISSING else value
    if op == OP_ADD:
        return old + decode_value(vt, vl, vd, vb)
    if op == OP_BIN:
        name, operand = pickle.loads(vb)
        return _BINOPS[name](old, operand)
    if op == OP_FN:
        return pickle.loads(vb)(old)
    raise ValueError(f"unknown write op {op}")


# -- the vectorized fold of sets and sums (an as-of resolution with numpy) -------------------------


@dataclass(frozen=True)
class VectorFoldSpec:
    """A vectorized resolution: each state's path (set, add or sum; own state is set), the
    states whose default is a float, and own states (whose last values come from their step)."""

    paths: dict[int, str]
    float_default: frozenset[int] = frozenset()
    own: frozenset[int] = frozenset()


_FOLD_COLS = (
    "_rs_s", "_rs_k", "_rs_o", "_rs_h", "_rs_op", "_rs_vt", "_rs_vl", "_rs_vd", "_rs_vb",
    "_rs_step", "_rs_pk",
)  # fmt: skip


class VectorFoldTask:
    """Resolve requests against overwrites, deletes and additions with numpy.

    Input rows are sorted by (state, key, position) within the partition. A key's value at a
    row is its last overwrite or delete (or nothing) plus the additions after it: ints by a
    segmented cumulative sum (exact; a sum near 2**63 is marked BAD and the replay falls
    back), floats by adding one after the other in order, exactly as the serial engine does.
    A key's value at the end of a batch carries into the next batch as a synthetic overwrite.
    Output: a RESOLVED row per request and a LAST row (``_rs_last``) per key, except own state.
    """

    def __init__(self, spec: VectorFoldSpec):
        self.spec = spec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        inject_fault("fold")
        carry: dict | None = None
        types = None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            cols = {c: batch.column(c) for c in _FOLD_COLS}
            types = {c: cols[c].type for c in _FOLD_COLS}
            if carry is not None:
                cols = {
                    c: pa.concat_arrays([pa.array([carry[c]], type=types[c]), cols[c]])
                    for c in _FOLD_COLS
                }
            out, carry = self._fold(cols, carry is not None)
            if out is not None:
                yield out
        if carry is not None and carry["_rs_s"] not in self.spec.own:
            cols = {c: pa.array([carry[c]], type=types[c]) for c in _FOLD_COLS}
            yield self._rows(
                cols,
                np.array([0]),
                np.array([LAST], dtype=np.int8),
                (
                    np.array([carry["_rs_vt"]], dtype=np.int8),
                    pa.array([carry["_rs_vl"]], pa.int64()),
                    pa.array([carry["_rs_vd"]], pa.float64()),
                    pa.array([carry["_rs_vb"]], pa.binary()),
                ),
                np.array([True]),
            )

    def _fold(self, cols: dict, synthetic: bool) -> tuple[pa.RecordBatch | None, dict]:
        spec = self.spec
        n = len(cols["_rs_s"])
        s = cols["_rs_s"].to_numpy(zero_copy_only=False)
        k = cols["_rs_k"]
        op = cols["_rs_op"].to_numpy(zero_copy_only=False)
        vt = pc.fill_null(cols["_rs_vt"], -1).to_numpy(zero_copy_only=False).astype(np.int8)
        vl = pc.fill_null(cols["_rs_vl"], 0).to_numpy(zero_copy_only=False)
        vd = pc.fill_null(cols["_rs_vd"], 0.0).to_numpy(zero_copy_only=False)
        idx = np.arange(n)
        new = np.ones(n, dtype=bool)
        if n > 1:
            same_k = pc.fill_null(pc.equal(k.slice(1), k.slice(0, n - 1)), False)
            new[1:] = (s[1:] != s[:-1]) | ~same_k.to_numpy(zero_copy_only=False)
        gid = np.cumsum(new) - 1
        start = np.flatnonzero(new)[gid]
        reset = (op == OP_SET) | (op == OP_DEL)
        add = op == OP_ADD
        last_reset = np.maximum.accumulate(np.where(reset, idx, -1))
        valid = last_reset >= start
        ref = np.where(valid, last_reset, start - 1)  # additions count from ref + 1

        def since(values: np.ndarray) -> np.ndarray:
            cs = np.cumsum(values)
            return cs - np.where(ref >= 0, cs[np.maximum(ref, 0)], 0)

        is_float = add & (vt == FLOAT)
        base = np.maximum(last_reset, 0)
        base_vt = np.where(valid & (op[base] == OP_SET), vt[base], ABSENT).astype(np.int8)
        base_int = (base_vt == INT) | (base_vt == BOOL)
        float_default = np.isin(s, list(spec.float_default))
        fold = _Fold(
            vt=vt,
            vl=vl,
            vd=vd,
            vb=cols["_rs_vb"],
            add=add,
            is_float=is_float,
            ref=ref,
            base=base,
            base_vt=base_vt,
            n_add=since(add.astype(np.int64)),
            sum_l=since(np.where(add & ~is_float, vl, 0)) + np.where(base_int, vl[base], 0),
            approx=since(np.where(add, np.where(is_float, vd, vl.astype(np.float64)), 0.0))
            + np.where(base_vt == FLOAT, vd[base], np.where(base_int, vl[base], 0)),
            floating=(base_vt == FLOAT)
            | (since(is_float.astype(np.int64)) > 0)
            | ((base_vt == ABSENT) & float_default),
            float_default=float_default,
        )
        is_last = np.zeros(n, dtype=bool)
        is_last[:-1] = new[1:]
        req = op == OP_REQ
        if synthetic:
            req[0] = False
        own = np.isin(s, list(spec.own))
        rows = np.flatnonzero(req | (is_last & ~own))
        tail = fold.values(np.array([n - 1]))
        carry = {c: cols[c][n - 1].as_py() for c in _FOLD_COLS}
        carry.update(
            _rs_op=OP_SET,
            _rs_vt=int(tail[0][0]),
            _rs_vl=tail[1][0].as_py(),
            _rs_vd=tail[2][0].as_py(),
            _rs_vb=tail[3][0].as_py(),
        )
        if carry["_rs_vt"] == ABSENT:
            carry["_rs_op"] = OP_DEL
        if not len(rows):
            return None, carry
        kinds = np.where(req[rows], RESOLVED, LAST).astype(np.int8)
        return self._rows(cols, rows, kinds, fold.values(rows), is_last[rows]), carry

    @staticmethod
    def _rows(cols, rows, kinds, values, last) -> pa.RecordBatch:
        take = pa.array(rows)
        answer = pa.array(kinds == RESOLVED)
        vt, vl, vd, vb = values
        arrays = [
            pa.array(kinds, pa.int8()),
            cols["_rs_s"].take(take),
            cols["_rs_k"].take(take),
            pc.if_else(answer, cols["_rs_o"].take(take), pa.nulls(len(rows), pa.int64())),
            pc.if_else(answer, cols["_rs_h"].take(take), pa.nulls(len(rows), pa.int32())),
            cols["_rs_step"].take(take),
            cols["_rs_pk"].take(take),
            pa.array(vt, pa.int8()),
            vl,
            vd,
            vb,
            pa.array(last, pa.bool_()),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=RES_SCHEMA)


@dataclass
class _Fold:
    """Per-row arrays of one batch of a vectorized fold (see :class:`VectorFoldTask`)."""

    vt: np.ndarray
    vl: np.ndarray
    vd: np.ndarray
    vb: pa.Array
    add: np.ndarray
    is_float: np.ndarray
    ref: np.ndarray
    base: np.ndarray
    base_vt: np.ndarray
    n_add: np.ndarray
    sum_l: np.ndarray
    approx: np.ndarray
    floating: np.ndarray
    float_default: np.ndarray

    def values(self, rows: np.ndarray) -> tuple:
        """(tags, longs, doubles, bytes) of the values at ``rows``."""
        exact = self.n_add[rows] == 0
        bvt = self.base_vt[rows]
        numeric = np.isin(bvt, (INT, FLOAT, BOOL, ABSENT))
        floating = self.floating[rows]
        big = np.abs(self.approx[rows]) >= 2.0**62
        tags = np.where(
            exact,
            bvt,
            np.where(~numeric, BAD, np.where(floating, FLOAT, np.where(big, BAD, INT))),
        ).astype(np.int8)
        base = self.base[rows]
        longs = np.where(exact, self.vl[base], self.sum_l[rows])
        doubles = np.where(exact, self.vd[base], 0.0)
        # Floats are added one after the other, as the serial engine adds them.
        for j in np.flatnonzero(tags == FLOAT).tolist():
            if exact[j]:
                continue
            i = int(rows[j])
            b = int(self.base[i])
            if bvt[j] == FLOAT:
                total: Any = float(self.vd[b])
            elif bvt[j] == ABSENT:
                total = 0.0 if self.float_default[i] else 0
            else:
                total = int(self.vl[b])
            for m in range(int(self.ref[i]) + 1, i + 1):
                if self.add[m]:
                    total = total + (float(self.vd[m]) if self.is_float[m] else int(self.vl[m]))
            doubles[j] = float(total)
        exact_data = exact & ((tags == STR) | (tags == PICKLE))
        data = pc.if_else(
            pa.array(exact_data), self.vb.take(pa.array(base)), pa.nulls(len(rows), pa.binary())
        )
        return (
            tags,
            pa.array(longs, pa.int64(), mask=~((tags == INT) | (tags == BOOL))),
            pa.array(doubles, pa.float64(), mask=tags != FLOAT),
            data,
        )


# -- key evaluation in Python ----------------------------------------------------------------------


@dataclass(frozen=True)
class KeysSpec:
    """Key expressions to evaluate per event: (output column, expression, kinds or None)."""

    program: ProgramRef
    columns: tuple[str, ...]
    pickled_columns: frozenset[str]
    keys: tuple[tuple[str, str, tuple[str, ...] | None], ...]
    passthrough: tuple[str, ...]


class KeysTask:
    """Append the encoded value of each key expression to each event (None where it raises)."""

    def __init__(self, spec: KeysSpec):
        self.spec = spec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        spec = self.spec
        inject_fault("keys")
        program = load_program(spec.program)
        fns = [(col, key_function(expr, program), kinds) for col, expr, kinds in spec.keys]
        make = event_type(spec.columns)
        for batch in batches:
            cols = [_column_values(batch, c, c in spec.pickled_columns) for c in spec.columns]
            events = [tuple.__new__(make, row) for row in zip(*cols)]
            arrays = [batch.column(c) for c in spec.passthrough]
            for _col, fn, kinds in fns:
                values = []
                for ev in events:
                    if kinds is not None and ev[2] not in kinds:
                        values.append(None)
                        continue
                    try:
                        values.append(encode_key(fn(ev)))
                    except Exception:  # noqa: BLE001 - the handler raises it itself, if it reads
                        values.append(None)
                arrays.append(pa.array(values, pa.string()))
            names = list(spec.passthrough) + [col for col, _, _ in spec.keys]
            yield pa.RecordBatch.from_arrays(arrays, names=names)


# -- the fallback: the serial engine in one task -------------------------------------------------


@dataclass(frozen=True)
class SerialSpec:
    program: ProgramRef
    columns: tuple[str, ...]
    pickled_columns: frozenset[str]
    types: bytes  # the log's Arrow schema, serialized
    on_error: str = "stop"


SERIAL_FIELDS = (
    ("_rs_kind", pa.int8(), "byte"),
    ("_rs_name", pa.string(), "string"),
    ("_rs_vb", pa.binary(), "binary"),
    ("_rs_vd", pa.float64(), "double"),
    ("_rs_vl", pa.int64(), "long"),
)


class SerialTask:
    """Run the serial engine over every event, which arrive in one partition in log order."""

    def __init__(self, spec: SerialSpec):
        self.spec = spec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from ...log import Log
        from .. import serial

        spec = self.spec
        inject_fault("serial")
        started = time.perf_counter()
        program = load_program(spec.program)
        schema = pa.ipc.read_schema(pa.py_buffer(spec.types))
        cols: dict[str, list] = {c: [] for c in spec.columns}
        for batch in batches:
            for c in spec.columns:
                cols[c].extend(_column_values(batch, c, c in spec.pickled_columns))
        arrays = []
        for c in spec.columns:
            typ = schema.field(c).type
            try:
                arrays.append(pa.array(cols[c], type=typ))
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                arrays.append(pa.array(cols[c]))
        table = pa.table(arrays, names=list(spec.columns))
        out = _Out(SERIAL_FIELDS)
        try:
            result = serial.replay(program, Log(table, cache=False), on_error=spec.on_error)
        except Exception as exc:  # noqa: BLE001 - shipped to the driver, raised there
            out.add(_rs_kind=ERROR, _rs_vb=_serial_error(exc))
            yield from out.flush(force=True)
            return
        for name, t in result.tables.items():
            out.add(_rs_kind=EMIT, _rs_name=name, _rs_vb=_ipc(t))
        for name, values in result.state.items():
            out.add(_rs_kind=FINAL, _rs_name=name, _rs_vb=pickle.dumps(values, protocol=5))
        if result.quarantine.num_rows:
            out.add(_rs_kind=QUAR, _rs_vb=_ipc(result.quarantine))
        out.add(
            _rs_kind=STAT,
            _rs_vd=time.perf_counter() - started,
            _rs_vl=result.metrics.scheduled_events,
        )
        yield from out.flush(force=True)


def _ipc(table: pa.Table) -> bytes:
    """A table as the bytes of an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _serial_error(exc: BaseException) -> bytes:
    from ...errors import HandlerError

    if isinstance(exc, HandlerError):
        info = {
            "handler_error": True,
            "handler": exc.handler,
            "lineno": exc.lineno,
            "line": exc.line,
            "lsn": exc.lsn,
            "seq": exc.seq,
            "kind": exc.kind,
            "ts": exc.ts,
            "fields": portable_fields(exc.fields or {}),
        }
        cause = exc.cause
    else:
        info = {"handler_error": False}
        cause = exc
    info["type"] = type(cause).__name__
    info["message"] = str(cause)
    info["class"] = type(exc).__name__
    info["text"] = str(exc)
    try:
        info["exc"] = pickle.dumps(cause, protocol=5)
        pickle.loads(info["exc"])
    except Exception:  # noqa: BLE001
        info["exc"] = None
    return pickle.dumps(info, protocol=5)
