"""Big state stores in a checkpoint as Arrow files: one column per key part, one for values.

A replay's state is mostly a few large dicts whose keys (or the parts of tuple keys) and
values are plain ``str``, ``int``, ``float`` or ``bool`` (``None`` allowed beside them). JSON
with type tags spends most of a commit walking such a dict; an Arrow table of its columns is
written and read at C speed. Each column holds one Python type, which its Arrow type keeps:
``int64`` reads back as ``int``, ``double`` as ``float``, ``bool`` as ``bool``, ``string`` as
``str`` and nulls as ``None``, so a store read back equals the one written, types included.
A store that does not fit (mixed types in a column, ints beyond 64 bits, tuple keys of
different lengths, other values) is left to the JSON codec, as are small stores.

A table is data, never code: reading one cannot run anything.
"""

from __future__ import annotations

from itertools import chain

import numpy as np
import pyarrow as pa

__all__ = ["MIN_KEYS", "store_columns", "store_from_table"]

#: Stores smaller than this stay in the JSON document (one file fewer per epoch).
MIN_KEYS = 512

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


def store_columns(store: dict) -> tuple[pa.Table, int | None] | None:
    """The store as a table ``k0.., v`` and its key shape (the tuple length, None for plain
    keys), or None when it must stay JSON."""
    if len(store) < MIN_KEYS:
        return None
    keys = list(store)
    if type(keys[0]) is tuple:
        arity = len(keys[0])
        if not arity or set(map(type, keys)) != {tuple} or set(map(len, keys)) != {arity}:
            return None
        parts = _key_parts(list(chain.from_iterable(keys)), arity)
        if parts is None:
            return None
    else:
        arity, parts = None, [_column(keys)]
    columns = {f"k{i}": part for i, part in enumerate(parts)}
    columns["v"] = _column(list(store.values()))
    if any(c is None for c in columns.values()):
        return None
    return pa.table(columns), arity


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


def store_from_table(table: pa.Table, arity: int | None) -> dict:
    """The dict :func:`store_columns` made ``table`` of."""
    names = table.column_names
    if names[-1] != "v" or len(names) != (arity or 1) + 1:
        raise ValueError(f"a state store table has columns {names}, not k0.., v")
    columns = [_values(table.column(name)) for name in names]
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
