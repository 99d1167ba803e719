"""State stores as tables of typed columns (a run's state, a checkpoint's big stores): one
column per key part, one for values; an epoch's output rows, one column per row field; and
the timed writes waiting at an epoch's end (the sliding windows of a rule are as many as its
events in a window).

A store is :func:`store_table`: keys ``k0`` (or ``k0..kN-1`` for tuple keys of N parts) and
values ``v``, each column as :mod:`._columns` encodes it (``int64``, ``double``, ``bool``,
``string``, structs for tuples, lists for lists and sets, a tag per value when types mix, JSON
text for what Arrow cannot type), the specs that read it back in the schema's metadata
(:data:`STORE_META`); a store read back equals the one written, types included. JSON with
type tags spends most of a commit walking a big dict; its columns are written and read at C
speed. An engine that folds a store's columns itself (the Spark prefix path) asks
:func:`store_columns` for plain ones only (one of ``int64``, ``double``, ``bool``,
``string``, nulls per column). Rows and timed writes go to columns when their values are
plain and of one type per field; otherwise (and when few) they stay in the JSON codec.

A table is data, never code: reading one cannot run anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain

import numpy as np
import pyarrow as pa

from ..model.values import ValueCodecError
from ._columns import decode_column, encode_column, spec_of_type

__all__ = [
    "MIN_KEYS",
    "STORE_META",
    "store_table",
    "table_arity",
    "store_columns",
    "store_from_table",
    "StoreColumns",
    "RowsColumns",
    "rows_columns",
    "rows_of_columns",
    "rows_from_table",
    "future_columns",
    "future_parts_columns",
    "FutureColumns",
    "future_from_table",
]

#: Stores smaller than this stay in the JSON document (one file fewer per epoch).
MIN_KEYS = 512

#: The schema metadata key of a state store table: its key shape and each column's spec.
STORE_META = "restream.columns"

_ARROW_TYPES = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
_NONE = type(None)


def _column(items: list) -> pa.Array | None:
    """``items`` as one Arrow array of their single Python type, or None when they differ."""
    types = set(map(type, items))
    types.discard(_NONE)
    if not types:
        return pa.nulls(len(items))
    if len(types) != 1:
        return None
    arrow = _ARROW_TYPES.get(types.pop())
    if arrow is None:
        return None
    try:
        return pa.array(items, arrow)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        return None  # an int beyond 64 bits, a string Arrow refuses


def store_columns(store: dict, *, plain: bool = True) -> tuple[pa.Table, int | None] | None:
    """The store as a table ``k0.., v`` (:func:`store_table`) and its key shape (the tuple
    length, None for other keys), or None when it stays in the JSON document: a small store,
    one holding a value the codec cannot store (the JSON path names it), or, when ``plain``,
    one whose columns are not each of one plain type (``int64``, ``double``, ``bool``,
    ``string``, nulls): what an engine folding the columns itself can take."""
    if len(store) < MIN_KEYS:
        return None
    try:
        table = store_table(store)
    except ValueCodecError:
        return None
    if plain and any(spec["k"] not in _PLAIN for spec in _store_meta(table)["columns"].values()):
        return None
    return table, table_arity(table)


#: The column kinds of a plain store (see :mod:`._columns`).
_PLAIN = frozenset({"int", "float", "bool", "str", "none"})


def store_table(store: Mapping) -> pa.Table:
    """A state store as a table of typed columns: ``k0`` (or ``k0..kN-1``, one per part of
    tuple keys that all have N parts) and ``v``, each column as :mod:`._columns` encodes it,
    with the specs that read it back in the schema's metadata. ValueCodecError when a key or
    value cannot be stored at all."""
    keys = list(store)
    arity = None
    if keys and type(keys[0]) is tuple:
        width = len(keys[0])
        if width and set(map(type, keys)) == {tuple} and set(map(len, keys)) == {width}:
            arity = width
    if arity is None:
        parts = [encode_column(keys)]
    else:
        flat = list(chain.from_iterable(keys))
        parts = [encode_column(flat[i::arity]) for i in range(arity)]
    parts.append(encode_column(list(store.values())))
    names = [f"k{i}" for i in range(len(parts) - 1)] + ["v"]
    meta = {"arity": arity, "columns": {n: spec for n, (_, spec) in zip(names, parts)}}
    table = pa.table(dict(zip(names, (a for a, _ in parts))))
    return table.replace_schema_metadata({STORE_META: json.dumps(meta)})


def table_arity(table: pa.Table) -> int | None:
    """The key shape of a :func:`store_table` (None: keys that are not split in parts)."""
    meta = _store_meta(table)
    if meta is not None:
        return meta["arity"]
    width = table.num_columns - 1
    return None if width == 1 else width


def _store_meta(table: pa.Table) -> dict | None:
    raw = (table.schema.metadata or {}).get(STORE_META.encode())
    if raw is None:
        return None
    try:
        meta = json.loads(raw)
        meta["arity"], meta["columns"]  # noqa: B018 - the keys must be there
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"a state store table's metadata is damaged ({exc})") from None
    return meta


def _key_parts(flat: list, arity: int) -> list | None:
    """The columns of tuple keys given as one flat list of their parts, key after key."""
    types = set(map(type, flat))
    if len(types) == 1 and types <= _ARROW_TYPES.keys():
        # One type throughout (the common case): one array, then every arity-th item.
        whole = _column(flat)
        if whole is None:
            return None
        at = np.arange(len(flat), dtype=np.int64)
        return [whole.take(at[i::arity]) for i in range(arity)]
    return [_column(flat[i::arity]) for i in range(arity)]


@dataclass
class StoreColumns:
    """A state store already in :func:`store_columns`' layout (``k0.., v`` and the key
    shape), from an engine that keeps it as columns: committed as it is."""

    table: pa.Table
    arity: int | None


def store_from_table(table: pa.Table, arity: int | None = None) -> dict:
    """The dict :func:`store_table` (or an engine's own ``k0.., v`` columns) made ``table``
    of; ``arity``, when given, must be the table's key shape."""
    names = table.column_names
    meta = _store_meta(table)
    if meta is None:  # an engine's own plain columns: their Arrow types say what they are
        specs = {name: spec_of_type(table.schema.field(name).type) for name in names}
    else:
        specs = meta["columns"]
        if arity is None:
            arity = meta["arity"]
        elif meta["arity"] != arity:
            raise ValueError(f"a state store table of key shape {meta['arity']}, not {arity}")
    if names[-1] != "v" or len(names) != (arity or 1) + 1 or set(specs) != set(names):
        raise ValueError(f"a state store table has columns {names}, not k0.., v")
    columns = [decode_column(table.column(name), specs[name]) for name in names]
    keys = zip(*columns[:-1]) if arity is not None else columns[0]
    return dict(zip(keys, columns[-1]))


def _values(column: pa.ChunkedArray) -> list:
    kind = column.type
    if kind not in (pa.int64(), pa.float64(), pa.bool_(), pa.string(), pa.null()):
        raise ValueError(f"a state store column of type {kind}")
    if column.null_count == 0 and kind in (pa.int64(), pa.float64()):
        # NumPy's tolist gives Python ints and floats, faster than Arrow's to_pylist.
        return column.to_numpy().tolist()
    return column.to_pylist()


#: The columns of every emitted row, before its fields (``"f:" + name`` each).
_ROW_HEAD = ("lsn", "ts", "handler", "seq")


def rows_columns(rows: list) -> pa.Table | None:
    """One table's rows as the serial engine keeps them, ``(lsn, ts, handler, seq, fields)``,
    as a table ``lsn, ts, handler, seq, f:<field>..``; None when they must stay JSON."""
    if len(rows) < MIN_KEYS or set(map(type, rows)) != {tuple} or set(map(len, rows)) != {5}:
        return None
    names = list(rows[0][4]) if type(rows[0][4]) is dict else None
    if names is None or any(type(r[4]) is not dict or list(r[4]) != names for r in rows):
        return None
    columns = {head: _column([r[i] for r in rows]) for i, head in enumerate(_ROW_HEAD)}
    for name in names:
        columns[f"f:{name}"] = _column([r[4][name] for r in rows])
    if any(c is None for c in columns.values()):
        return None
    return pa.table(columns)


@dataclass(frozen=True)
class RowsColumns:
    """One table's rows of an epoch already in :func:`rows_columns`' layout, from an engine
    that holds them as columns: committed as they are, read back as rows."""

    table: pa.Table


def rows_of_columns(
    lsn: np.ndarray, ts: np.ndarray, handler: list, seq: np.ndarray, fields: dict[str, list]
) -> RowsColumns | None:
    """Rows given as columns, in order, in :func:`rows_columns`' layout; None when a field
    holds values of several types (they must stay JSON, as rows)."""
    columns = {
        "lsn": pa.array(lsn, pa.int64()),
        "ts": pa.array(ts, pa.int64()),
        "handler": pa.array(handler, pa.string()),
        "seq": pa.array(seq, pa.int64()),
    }
    for name, values in fields.items():
        column = _column(values)
        if column is None:
            return None
        columns[f"f:{name}"] = column
    return RowsColumns(pa.table(columns))


def rows_from_table(table: pa.Table) -> list:
    """The rows :func:`rows_columns` made ``table`` of."""
    names = table.column_names
    if tuple(names[:4]) != _ROW_HEAD or not all(n.startswith("f:") for n in names[4:]):
        raise ValueError(f"a table of rows has columns {names}")
    head = [_values(table.column(name)) for name in _ROW_HEAD]
    fields = [n[2:] for n in names[4:]]
    values = [_values(table.column(n)) for n in names[4:]]
    return [
        (lsn, ts, handler, seq, dict(zip(fields, row)))
        for lsn, ts, handler, seq, *row in zip(*head, *values)
    ]


def future_columns(future: list) -> tuple[pa.Table, int | None] | None:
    """The timed writes a state holds waiting, ``(at, n, state, op, key, arg)``, as a table
    ``at, n, state, op, k0.., arg`` and the key shape (as :func:`store_columns`), or None
    when they must stay JSON (a merge function, mixed types, few of them)."""
    if len(future) < MIN_KEYS or set(map(type, future)) != {tuple} or set(map(len, future)) != {6}:
        return None
    return future_parts_columns(list(zip(*future)))


def future_parts_columns(parts: list) -> tuple[pa.Table, int | None] | None:
    """:func:`future_columns` of timed writes given as their six fields' sequences (``at``,
    ``n``, ``state``, ``op``, ``key``, ``arg``), each in the writes' order."""
    if len(parts[0]) < MIN_KEYS:
        return None
    keys = list(parts[4])
    if type(keys[0]) is tuple:
        arity = len(keys[0])
        if not arity or set(map(type, keys)) != {tuple} or set(map(len, keys)) != {arity}:
            return None
        key_columns = _key_parts(list(chain.from_iterable(keys)), arity)
    else:
        arity, key_columns = None, [_column(keys)]
    if key_columns is None:
        return None
    columns = {name: _column(list(parts[i])) for i, name in enumerate(("at", "n", "state", "op"))}
    columns.update({f"k{i}": part for i, part in enumerate(key_columns)})
    columns["arg"] = _column(list(parts[5]))
    if any(c is None for c in columns.values()) or columns["at"].type != pa.int64():
        return None
    return pa.table(columns), arity


@dataclass
class FutureColumns:
    """Timed writes already in :func:`future_columns`' layout (``at, n, state, op, k0..,
    arg`` and the key shape), from an engine that makes them as columns: committed as they
    are."""

    table: pa.Table
    arity: int | None


def future_from_table(table: pa.Table, arity: int | None) -> list:
    """The timed writes :func:`future_columns` made ``table`` of."""
    names = table.column_names
    width = arity or 1
    if names[:4] != ["at", "n", "state", "op"] or len(names) != 5 + width or names[-1] != "arg":
        raise ValueError(f"a table of timed writes has columns {names}")
    columns = [_values(table.column(name)) for name in names]
    keys = list(zip(*columns[4:-1])) if arity is not None else columns[4]
    return list(zip(columns[0], columns[1], columns[2], columns[3], keys, columns[-1]))
