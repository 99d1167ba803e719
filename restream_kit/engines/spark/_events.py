"""The log as Spark takes it: Arrow columns of types Spark reads, and the odd ones pickled.

:func:`prepare_events` turns a :class:`~restream_kit.io.log.Log`'s table into one that
``createDataFrame`` accepts without changing a value: dictionary, large, unsigned and
half-float columns are cast to their plain kin, and columns of any other type (lists,
structs, decimals...) travel as pickled bytes that the tasks unpickle
(``_program_ref.column_values``). The pickles are the kernel's own log on its way to its own
tasks; they are never written to a file. ``_rs_o`` numbers the events in log order.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ...io.log import Log
from ._program_ref import event_type
from ._shared_log import check_sent, shared_copy
from .session._ship import is_local

__all__ = ["EventsTable", "prepare_events", "log_events", "copy_file", "rowless_events"]

_SAFE = (
    pa.types.is_int8,
    pa.types.is_int16,
    pa.types.is_int32,
    pa.types.is_int64,
    pa.types.is_float32,
    pa.types.is_float64,
    pa.types.is_boolean,
    pa.types.is_string,
    pa.types.is_binary,
)


@dataclass
class EventsTable:
    """The log ready for Spark: safe column types, ``_rs_o`` and pickled odd columns."""

    table: pa.Table
    columns: tuple[str, ...]
    pickled: frozenset[str]
    types: dict[str, pa.DataType]

    @property
    def event_fields(self) -> tuple[str, ...]:
        """Attribute names of events: the columns, as the named tuple type renames them."""
        return event_type(self.columns)._fields


def prepare_events(log: Log) -> EventsTable:
    """``log``'s table as Spark takes it (see the module docstring)."""
    table = log.table
    arrays = []
    pickled = set()
    types = {}
    for name in table.column_names:
        col = table.column(name)
        typ = col.type
        if pa.types.is_dictionary(typ):
            col = col.cast(typ.value_type)
            typ = col.type
        if pa.types.is_large_string(typ):
            col, typ = col.cast(pa.string()), pa.string()
        elif pa.types.is_large_binary(typ):
            col, typ = col.cast(pa.binary()), pa.binary()
        elif typ in (pa.uint8(), pa.uint16(), pa.uint32()):
            col, typ = col.cast(pa.int64()), pa.int64()
        elif pa.types.is_float16(typ):
            col, typ = col.cast(pa.float32()), pa.float32()
        elif pa.types.is_null(typ):
            col, typ = col.cast(pa.string()), pa.string()
        if not any(check(typ) for check in _SAFE):
            values = [None if v is None else pickle.dumps(v, protocol=5) for v in col.to_pylist()]
            col, typ = pa.chunked_array([pa.array(values, pa.binary())]), pa.binary()
            pickled.add(name)
        arrays.append(col)
        types[name] = typ
    arrays.append(pa.array(np.arange(table.num_rows, dtype=np.int64)))
    names = [*table.column_names, "_rs_o"]
    out = pa.table(arrays, names=names)
    return EventsTable(out, tuple(table.column_names), frozenset(pickled), types)


def log_events(log: Log, session: Any) -> EventsTable:
    """The engine's view of a file ``log`` for the pass path: with no rows when the log has
    an ordered copy whose columns Spark reads as they are and ``session``'s executors can
    read it, on this disk (a local master) or in the shared directory (a cluster,
    ``_shared_log``), for the tasks read that copy (``passes._setup``,
    ``passes._local_arrangement``); else ``log``'s table as Spark takes it
    (:func:`prepare_events`), which a cluster takes only for a small log."""
    if (
        log.uri is None
        and log.copied
        and all(any(check(f.type) for check in _SAFE) for f in log.schema)
        and (is_local(session) or shared_copy(session, log) is not None)
    ):
        return rowless_events(log.schema)
    if not is_local(session):
        check_sent(log, getattr(getattr(session, "sparkContext", None), "master", "a cluster"))
    return prepare_events(log)


def copy_file(session: Any, log: Log) -> str:
    """Where ``session``'s executors read ``log``'s ordered copy (a rowless log's, see
    :func:`log_events`): on this disk on a local master, else in the shared directory."""
    if is_local(session):
        return str(log.ordered().path)
    return shared_copy(session, log)


def rowless_events(schema: pa.Schema) -> EventsTable:
    """The columns of a log whose rows stay where they lie (read by Spark or its tasks)."""
    empty = schema.append(pa.field("_rs_o", pa.int64())).empty_table()
    return EventsTable(empty, tuple(schema.names), frozenset(), {f.name: f.type for f in schema})
