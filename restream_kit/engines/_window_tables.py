"""The serial engine's output tables, where native windows left their rows as columns.

A table whose rows all came from closing windows (``runtime._window_rows.WindowRows``), or
all from one emit written out in the loop (``EmitRows``), is built from their columns at once, exactly as ``build_table`` builds it from the rows (the same
columns, order and types); any other table, or one whose values ``build_table`` would treat
specially (a value Arrow cannot type, booleans among numbers), is built by ``build_table``
from the rows as tuples, with its errors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain, repeat
from typing import Any

import numpy as np
import pyarrow as pa

from ..io.result import ROW_COLUMNS, build_table
from ..runtime.windows import ROW_FIELDS, EmitRows, WindowRows

__all__ = ["emitted_table", "block_table", "as_rows"]


def emitted_table(name: str, rows: list, blocked: bool) -> pa.Table:
    """Output table ``name`` from its list of rows; ``blocked``: whether windows may have put
    :class:`WindowRows` in it."""
    if not blocked:
        return build_table(name, rows)
    table = block_table(rows)
    return table if table is not None else build_table(name, as_rows(rows))


def block_table(rows: list) -> pa.Table | None:
    """The table of ``rows`` when they are all :class:`WindowRows` or all :class:`EmitRows`
    and built from their columns at once; None where ``build_table`` must decide."""
    if rows and all(type(r) is WindowRows for r in rows):
        return _from_columns(rows)
    if rows and all(type(r) is EmitRows for r in rows):
        return _from_emits(rows)
    return None


def as_rows(rows: Iterable) -> list[tuple]:
    """``rows`` with every :class:`WindowRows` written out as its row tuples."""
    out: list[tuple] = []
    for r in rows:
        if type(r) is WindowRows or type(r) is EmitRows:
            out.extend(r.rows())
        else:
            out.append(r)
    return out


def _from_columns(blocks: list[WindowRows]) -> pa.Table | None:
    """The table of rows that all came from windows, or None where ``build_table`` must
    decide (a field Arrow cannot type as it is, or booleans, which it checks for numbers)."""
    given = _int_columns(blocks)
    parts = [b.columns(omit=frozenset(given)) for b in blocks]
    counts = [p["n"] for p in parts]
    fields = {}
    for name in ROW_FIELDS:
        array = given[name] if name in given else _field(_window_field, parts, name, counts)
        if array is None:
            return None
        fields[name] = array
    end = fields["end"]
    if end.type == pa.int64() and all(p["end"] is p["ts"] for p in parts):
        ts = end  # (sessions' rows: a row's time is its end, as integers here)
    else:
        ts = _repeated(parts, "ts", counts) or pa.array(_column(parts, "ts"), pa.int64())
    columns = {
        "lsn": given["lsn"] if "lsn" in given else pa.array(_column(parts, "lsn"), pa.int64()),
        "ts": ts,
        "handler": _strings([b.handler for b in blocks], counts),
        "seq": given["seq"] if "seq" in given else pa.array(_column(parts, "seq"), pa.int64()),
    }
    return pa.table({**columns, **fields})


def _int_columns(blocks: list[WindowRows]) -> dict[str, pa.Array]:
    """The columns of closed windows' rows whose values are integers by how they are made
    (``WindowRows.int_items``), each taken from the records into one int64 array at C
    speed, with no list of Python ints between (on keys with about a window per event,
    those lists were most of the table's cost): the arrays ``pa.array`` makes of the same
    values. None where some block gives a column otherwise; none at all when there are no
    rows (``pa.array`` types an empty column as null) or a value is beyond int64 (left to
    the lists, to fail or fall back as they do)."""
    total = sum(b.n for b in blocks)
    if not total:
        return {}
    out = {}
    for name in ("lsn", "seq", "start", "end", "value"):
        items = [b.int_items(name) for b in blocks]
        if any(i is None for i in items):
            continue
        try:
            out[name] = pa.array(np.fromiter(chain.from_iterable(items), np.int64, total))
        except (OverflowError, TypeError):
            return {}
    return out


def _from_emits(blocks: list[EmitRows]) -> pa.Table | None:
    """The table of rows that all came from written-out emits of the same fields, or None
    where ``build_table`` must decide (as :func:`_from_columns`; fields that differ between
    blocks, or named as a column every row has, which it reports)."""
    fields = blocks[0].fields
    if any(b.fields != fields for b in blocks) or any(f in ROW_COLUMNS for f in fields):
        return None
    counts = [len(b) for b in blocks]
    columns = {
        "lsn": _int64(_emitted(blocks, 0)),
        "ts": _int64(_emitted(blocks, 1)),
        "handler": _strings([b.handler for b in blocks], counts),
        "seq": _emitted_seqs(blocks, counts),
    }
    for i, name in enumerate(fields, 2):
        array = _field(_item, blocks, i)
        if array is None:
            return None
        columns[name] = array
    return pa.table(columns)


def _emitted_seqs(blocks: list[EmitRows], counts: list[int]) -> pa.Array:
    """The ``seq`` of every row of ``blocks``: each block's repeated, or its rows' own."""
    if not any(b.seqs for b in blocks):
        return pa.array(np.repeat(np.array([b.seq for b in blocks], dtype=np.int64), counts))
    return pa.array(list(chain.from_iterable(b.seq_column() for b in blocks)), pa.int64())


def _field(make: Callable[..., pa.Array], *args: Any) -> pa.Array | None:
    """A field's column, ``make(*args)``, or None where ``build_table`` must decide: values
    Arrow cannot type as they are, or booleans (which it checks for numbers among)."""
    try:
        array = make(*args)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return None
    return None if pa.types.is_boolean(array.type) else array


def _window_field(parts: list[dict], name: str, counts: list[int]) -> pa.Array:
    """Field ``name`` of closed windows' rows: one integer repeated, or their values."""
    return _repeated(parts, name, counts) or _array(_column(parts, name))


def _array(values: list) -> pa.Array:
    """``pa.array(values)``, at C speed when they are all int64 integers (:func:`_ints`) or
    all tuples of them (:func:`_int_tuples`: a key of several fields)."""
    ints = _ints(values)
    if ints is not None:
        return pa.array(ints)
    if values and type(values[0]) is tuple and set(map(type, values)) == {tuple}:
        tuples = _int_tuples(values)
        if tuples is not None:
            return tuples
    return pa.array(values)


def _item(blocks: list[EmitRows], i: int) -> pa.Array:
    """Item ``i`` of every row of written-out emits, as a column."""
    return _array(_emitted(blocks, i))


def _int64(values: list) -> pa.Array:
    """``values`` as an int64 column: at C speed when they are all integers within int64,
    else as ``pa.array`` makes it given the type int64."""
    ints = _ints(values)
    return pa.array(ints) if ints is not None else pa.array(values, pa.int64())


#: How many values :func:`_ints` checks and converts at a time: their objects, read twice
#: (for their type, then their value), are still in the CPU's cache the second time.
_CHUNK = 1 << 14


def _ints(values: list) -> np.ndarray | None:
    """``values`` as an int64 array when they are all integers (of type ``int`` itself)
    within int64; None otherwise, or when there are none. Taken a chunk at a time (a
    column of a million integers made over a replay lies all over memory: read in one
    pass for the types and one for the values, it was fetched twice)."""
    n = len(values)
    if not n:
        return None
    out = np.empty(n, np.int64)
    for start in range(0, n, _CHUNK):
        chunk = values[start : start + _CHUNK]
        if set(map(type, chunk)) != {int}:
            return None
        try:
            out[start : start + len(chunk)] = np.fromiter(chunk, np.int64, len(chunk))
        except OverflowError:
            return None
    return out


def _int_tuples(values: list) -> pa.Array | None:
    """``values`` (tuples) as ``pa.array`` types them when they are tuples of integers, not
    all empty (a key of several fields): a list of int64 column, made at C speed. None
    otherwise, or for an integer beyond int64 (``pa.array`` decides)."""
    flat = list(chain.from_iterable(values))
    if len(flat) >= 2**31:
        return None  # (past 2**31 items, list offsets are not int32)
    items = _ints(flat)
    if items is None:
        return None
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, values), np.int32, len(values)), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(items))


def _emitted(blocks: list[EmitRows], i: int) -> list:
    """Item ``i`` of every row of ``blocks``, one after the other, as one list."""
    if len(blocks) == 1:
        return blocks[0].column(i)
    return list(chain.from_iterable(b.column(i) for b in blocks))


def _column(parts: list[dict], name: str) -> list:
    """Column ``name`` of every part, one after the other, as one list."""
    if len(parts) == 1 and type(parts[0][name]) is list:  # (one part's list, as it is)
        return parts[0][name]
    return list(
        chain.from_iterable(
            p[name] if isinstance(p[name], (list, tuple)) else repeat(p[name], p["n"])
            for p in parts
        )
    )


def _repeated(parts: list[dict], name: str, counts: list[int]) -> pa.Array | None:
    """Column ``name`` when every part gives one integer for all its rows (a window's
    start, end and close time): each repeated at C speed, typed as Arrow types integers
    (int64; one too large for it raises as ``pa.array`` would). None otherwise."""
    values = [p[name] for p in parts]
    if set(map(type, values)) != {int}:
        return None
    return pa.array(np.repeat(np.array(values, dtype=np.int64), counts))


def _strings(values: list[str], counts: list[int]) -> pa.Array:
    """Each of ``values`` repeated ``counts`` times, as one string column."""
    first = pa.array(values, pa.string())
    return first.take(pa.array(np.repeat(np.arange(len(values), dtype=np.int64), counts)))
