"""A run's state version history: every write to every state, with where in the run it happened.

A serial replay asked for it (``replay(..., history=True)``) keeps its states in
:class:`RecordingDict` stores, which note each write as ``(lsn, handler, key, value after)``
(or a delete) before applying it. Nothing else changes in the hot loop, and a replay that did
not ask pays nothing. The writes of one state become an Arrow table (:class:`History`), stored
under the run's directory in the catalog as ``history/state/NNNN.parquet`` next to
``history/history.json`` (the log's fingerprint, each stage's identity and handlers, each
state's file and column encodings). The rows a stage emitted are the run's own tables: every
row names its handler. Keys and values of one plain type (int, float, str, bool) are stored as
that Arrow type; anything else goes through the value codec (:mod:`restream_kit.values`) as
JSON text. No pickles.

Why the value after the write rather than a delta for merges: an as-of read (the value of
``state[key]`` just before a handler run) is then one as-of join, with no running sum to redo.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from . import values

__all__ = [
    "RecordingDict",
    "Recorder",
    "History",
    "HISTORY_DIR",
    "DELETED",
    "encode_column",
    "decode_column",
    "codec_text",
    "timing_reason",
    "disk_size",
]

#: The folder of a run directory that holds its history.
HISTORY_DIR = "history"
_INDEX = "history.json"
_FORMAT = 1

#: The value a recorded delete carries.
DELETED = object()

_ARROW_TYPES = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}


class RecordingDict(dict):
    """A state store that notes every write (``lsn``, handler, key, value after) in ``writes``.

    The runtime knows the event and handler being run; reads stay plain ``dict.get`` calls.
    """

    __slots__ = ("rt", "writes")

    def __init__(self, rt: Any, writes: list):
        super().__init__()
        self.rt = rt
        self.writes = writes

    def __setitem__(self, key: Any, value: Any) -> None:
        rt = self.rt
        self.writes.append((rt.event[0], rt.handler, key, value))
        dict.__setitem__(self, key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        rt = self.rt
        self.writes.append((rt.event[0], rt.handler, key, DELETED))
        return dict.pop(self, key, *default)

    def __delitem__(self, key: Any) -> None:
        self.pop(key)


class Recorder:
    """Recording stores for a replay's states, and the :class:`History` they make."""

    def __init__(self, rt: Any, program: Any):
        self.writes: dict[str, list] = {name: [] for name in program.states}
        self.stores = {name: RecordingDict(rt, self.writes[name]) for name in program.states}

    def finish(self, program: Any, log: Any, rt: Any, result: Any) -> History:
        """The history; ``result.state`` becomes plain dicts."""
        hist = History.build(program, log, self.writes)
        if hist.unusable is None and sum(rt.scheduled_per_root.values()):
            hist.unusable = f"{program.name} scheduled events"
        result.state = {name: dict(d) for name, d in result.state.items()}
        return hist


def codec_text(value: Any) -> str:
    """``value`` through the value codec, as compact JSON text (equal values, equal text)."""
    return json.dumps(values.encode(value), separators=(",", ":"))


def encode_column(items: list) -> tuple[pa.Array, str]:
    """``items`` as an Arrow array and its encoding: an Arrow type name, or ``codec``.

    ``DELETED`` items become nulls. One plain Python type (by exact type: 1 and 1.0 and True
    are kept apart) is stored as itself; anything else as codec JSON text.
    """
    present = [x for x in items if x is not DELETED]
    types = set(map(type, present))
    if len(types) == 1 and (t := next(iter(types))) in _ARROW_TYPES:
        try:
            arr = pa.array([None if x is DELETED else x for x in items], _ARROW_TYPES[t])
            return arr, str(_ARROW_TYPES[t])
        except (OverflowError, pa.ArrowException):
            pass
    texts = [None if x is DELETED else codec_text(x) for x in items]
    return pa.array(texts, pa.string()), "codec"


def decode_column(items: list, encoding: str) -> list:
    """Python values of a column :func:`encode_column` made (nulls stay None)."""
    if encoding != "codec":
        return items
    return [None if x is None else values.decode(json.loads(x)) for x in items]


@dataclass
class History:
    """The writes of every state of a run, and what the run's stages were."""

    log_fingerprint: str
    #: Stage name -> identity (``restream_kit.identity.stage_identities``).
    identities: dict[str, str]
    #: Stage name -> its handlers.
    stages: dict[str, list[str]]
    #: State -> table of writes in run order: ``lsn``, ``handler``, ``key``, ``value``,
    #: ``deleted``; ``key``/``value`` encoded as ``encodings[state]`` says.
    writes: dict[str, pa.Table] = field(default_factory=dict)
    #: State -> {"key": encoding, "value": encoding}.
    encodings: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Why positions in this history cannot serve reads (timed writes, scheduled events).
    unusable: str | None = None

    @classmethod
    def build(cls, program: Any, log: Any, writes: dict[str, list]) -> History:
        """The history of a replay of ``program`` over ``log`` whose stores recorded ``writes``."""
        from .identity import stage_identities
        from .planner import plan as make_plan

        plan = make_plan(program, allow_nondeterminism=True)
        hist = cls(
            log_fingerprint=log.fingerprint,
            identities=stage_identities(program, plan),
            stages={s.name: list(s.handlers) for s in plan.stages},
            unusable=timing_reason(program),
        )
        for state, rows in writes.items():
            hist.add_state(state, rows)
        return hist

    def add_state(self, state: str, rows: list[tuple]) -> None:
        """Add the recorded ``(lsn, handler, key, value)`` writes of ``state``."""
        lsn, handler, keys, vals = (list(c) for c in zip(*rows)) if rows else ([], [], [], [])
        key_arr, key_enc = encode_column(keys)
        value_arr, value_enc = encode_column(vals)
        self.writes[state] = pa.table(
            {
                "lsn": pa.array(lsn, pa.int64()),
                "handler": pa.array(handler, pa.string()),
                "key": key_arr,
                "value": value_arr,
                "deleted": pa.array([v is DELETED for v in vals], pa.bool_()),
            }
        )
        self.encodings[state] = {"key": key_enc, "value": value_enc}

    @property
    def nbytes(self) -> int:
        """Bytes the write tables take in memory."""
        return sum(t.nbytes for t in self.writes.values())

    def write(self, run_dir: str | Path) -> None:
        """Write the history under ``run_dir/history/``."""
        out = Path(run_dir) / HISTORY_DIR
        (out / "state").mkdir(parents=True, mode=0o700, exist_ok=True)
        files = {}
        for i, (state, table) in enumerate(self.writes.items()):
            rel = f"state/{i:04d}.parquet"  # state names need not be file names
            pq.write_table(table, out / rel)
            files[state] = rel
        index = {
            "format": _FORMAT,
            "log_fingerprint": self.log_fingerprint,
            "identities": self.identities,
            "stages": self.stages,
            "states": {s: {"file": files[s], **self.encodings[s]} for s in self.writes},
            "unusable": self.unusable,
        }
        (out / _INDEX).write_text(json.dumps(index, indent=1))

    @classmethod
    def read(cls, run_dir: str | Path) -> History | None:
        """The history stored under ``run_dir``, or None when the run kept none."""
        where = Path(run_dir) / HISTORY_DIR
        if not (where / _INDEX).exists():
            return None
        index = json.loads((where / _INDEX).read_text())
        hist = cls(
            log_fingerprint=index["log_fingerprint"],
            identities=index["identities"],
            stages=index["stages"],
            unusable=index.get("unusable"),
        )
        for state, info in index["states"].items():
            hist.writes[state] = pq.read_table(where / info["file"])
            hist.encodings[state] = {"key": info["key"], "value": info["value"]}
        return hist


def timing_reason(program: Any) -> str | None:
    """Why a history of ``program`` cannot place its writes by event and handler alone.

    A write with ``at=`` lands between events and a scheduled event runs between log events:
    neither has a place among (log event, handler) positions, which is what reads are served by.
    """
    import ast

    from .checks import scheduled_fields

    if scheduled_fields(program):
        return f"{program.name} schedules events (schedule(...) or a window)"
    for node in ast.walk(program.module_ast):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("set", "add", "merge", "delete")
            and any(kw.arg == "at" for kw in node.keywords)
        ):
            return f"{program.name} writes state with at= (line {node.lineno})"
    return None


def disk_size(run_dir: str | Path) -> int:
    """Bytes the history of the run in ``run_dir`` takes on disk (0 without one)."""
    where = Path(run_dir) / HISTORY_DIR
    return sum(p.stat().st_size for p in where.rglob("*") if p.is_file()) if where.exists() else 0
