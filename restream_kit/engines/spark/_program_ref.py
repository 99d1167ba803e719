"""The program and its events inside a Spark task.

A program travels to the workers as its source text (:class:`ProgramRef`: a file's or a
notebook cell's, alike) and is loaded once per worker process (:func:`load_program`). Events
are rebuilt from Arrow batches as the serial engine's named tuples (:func:`event_type`,
:func:`column_values`), and key expressions become functions (:func:`key_function`).
Nothing here imports pyspark.
"""

from __future__ import annotations

import linecache
import pickle
from collections import namedtuple
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ...model.program import Program

__all__ = ["ProgramRef", "load_program", "event_type", "key_function", "column_values"]


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
    else:
        # Cells share a file name: the lines a quarantined run or an error quotes must be
        # this program's, whichever program the worker loaded last.
        source = ref.source
        linecache.cache[ref.filename] = (len(source), None, source.splitlines(True), ref.filename)
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


def column_values(batch: pa.RecordBatch, name: str, pickled: bool) -> list:
    """A column of ``batch`` as Python values; ``pickled`` columns (odd types the log had,
    see ``_events``) are unpickled. They are the kernel's own log, sent to its own tasks."""
    values = batch.column(name).to_pylist()
    if pickled:
        return [None if v is None else pickle.loads(v) for v in values]
    return values
