"""Python values as typed Arrow columns and back, exactly: how state is stored as Parquet.

A column of values is encoded by what its values are, each kind described by a small JSON
*spec* kept beside it (in the Parquet file's metadata, and in the run's manifest):

============  ============================================  =================================
spec ``k``    values                                        Arrow column
============  ============================================  =================================
``int``       ``int`` within 64 bits (``None`` allowed)     ``int64``
``float``     ``float``, NaN and -0.0 kept                  ``double``
``bool``      ``bool`` (never an int)                       ``bool``
``str``       ``str``                                       ``string``
``none``      only ``None``                                 ``null``
``tuple``     tuples of one length, item by item            ``struct<0, 1, ..>`` (``items``)
``list``      lists (``set``, ``frozenset`` the same way)   ``list<item>`` (``item``)
``mixed``     values of several kinds                       ``struct<tag: int8, <kind>..>``
``json``      anything else :mod:`..model.values` stores    ``string`` (its tagged JSON)
============  ============================================  =================================

Types are told apart by their exact Python type, so ``3``, ``3.0`` and ``True`` stay
distinct, as do a tuple and a list of the same items. ``None`` is a null in any column. An
int beyond 64 bits, a dict, bytes, dates and the like make their column ``json`` (or their
kind's child of a ``mixed`` column): still exact, not typed. Columns are built from whole
lists (``pa.array``), never value by value, and read back through NumPy where they can be.

Reading builds nothing but plain values: a file can never run code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa

from ..model import values

__all__ = ["encode_column", "decode_column", "spec_of_type", "ColumnSpec"]

ColumnSpec = dict[str, Any]

_NONE = type(None)
_SCALAR = {int: ("int", pa.int64()), float: ("float", pa.float64()), bool: ("bool", pa.bool_())}
_SCALAR[str] = ("str", pa.string())
_SEQUENCES: dict[type, str] = {list: "list", set: "set", frozenset: "frozenset"}
_BUILD: dict[str, Callable[[list], Any]] = {"list": list, "set": set, "frozenset": frozenset}
#: The kinds of a ``mixed`` column, in tag order (the tag is the index; 0 is None).
_KINDS = ("none", "int", "float", "bool", "str", "tuple", "list", "set", "frozenset", "json")
_KIND_OF: dict[type, str] = {
    _NONE: "none",
    int: "int",
    float: "float",
    bool: "bool",
    str: "str",
    tuple: "tuple",
    list: "list",
    set: "set",
    frozenset: "frozenset",
}
#: Nesting deeper than this is stored as JSON (a column per level would be absurd).
_MAX_DEPTH = 8


def encode_column(items: list, depth: int = 0) -> tuple[pa.Array, ColumnSpec]:
    """``items`` as one Arrow array and the spec that reads it back; ValueCodecError for a
    value the value codec cannot store either."""
    types = set(map(type, items))
    nones = _NONE in types
    types.discard(_NONE)
    if not types:
        return pa.nulls(len(items)), {"k": "none"}
    if len(types) == 1:
        t = next(iter(types))
        if t in _SCALAR:
            kind, arrow = _SCALAR[t]
            try:
                if t is int and not nones:  # NumPy reads Python ints faster than Arrow
                    return pa.array(np.fromiter(items, np.int64, len(items))), {"k": kind}
                return pa.array(items, arrow), {"k": kind}
            except (OverflowError, pa.ArrowException):
                return _json(items)  # an int beyond 64 bits
        if depth < _MAX_DEPTH:
            if t is tuple:
                out = _tuples(items, depth)
                if out is not None:
                    return out
            elif t in _SEQUENCES:
                return _sequences(items, _SEQUENCES[t], depth)
        return _json(items)
    if depth < _MAX_DEPTH:
        return _mixed(items, depth)
    return _json(items)


def _json(items: list) -> tuple[pa.Array, ColumnSpec]:
    texts = [None if x is None else _text(x) for x in items]
    return pa.array(texts, pa.string()), {"k": "json"}


def _text(value: Any) -> str:
    return json.dumps(
        values.encode(value), ensure_ascii=False, allow_nan=False, separators=(",", ":")
    )


def _tuples(items: list, depth: int) -> tuple[pa.Array, ColumnSpec] | None:
    """Tuples of one length as a struct of their items' columns (None: lengths differ)."""
    present = [x for x in items if x is not None]
    present = items if len(present) == len(items) else present
    lengths = set(map(len, present))
    if len(lengths) != 1 or 0 in lengths:
        return None
    width = lengths.pop()
    filled = present if present is items else [(None,) * width if x is None else x for x in items]
    flat = list(chain.from_iterable(filled))
    parts = [encode_column(flat[i::width], depth + 1) for i in range(width)]
    mask = None if present is items else pa.array([x is None for x in items], pa.bool_())
    array = pa.StructArray.from_arrays(
        [a for a, _ in parts], names=[str(i) for i in range(width)], mask=mask
    )
    return array, {"k": "tuple", "items": [s for _, s in parts]}


def _sequences(items: list, kind: str, depth: int) -> tuple[pa.Array, ColumnSpec]:
    """Lists (or sets) as a list column of their items' column."""
    lengths = [0 if x is None else len(x) for x in items]
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    inner, spec = encode_column(
        list(chain.from_iterable(x for x in items if x is not None)), depth + 1
    )
    mask = pa.array([x is None for x in items], pa.bool_()) if 0 in lengths else None
    array = pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), inner, mask=mask)
    return array, {"k": kind, "item": spec}


def _mixed(items: list, depth: int) -> tuple[pa.Array, ColumnSpec]:
    """Values of several kinds: a tag per value and a column per kind (null elsewhere)."""
    tags = np.fromiter(
        (_KINDS.index(_KIND_OF.get(t, "json")) for t in map(type, items)),
        dtype=np.int8,
        count=len(items),
    )
    arrays = [pa.array(tags, pa.int8())]
    names = ["tag"]
    specs: dict[str, ColumnSpec] = {}
    for code in np.unique(tags).tolist():
        kind = _KINDS[code]
        if kind == "none":
            continue
        at = set(np.flatnonzero(tags == code).tolist())
        group = [x if i in at else None for i, x in enumerate(items)]
        # The "json" kind holds several types: encode_column would make it mixed again.
        child, spec = _json(group) if kind == "json" else encode_column(group, depth + 1)
        arrays.append(child)
        names.append(kind)
        specs[kind] = spec
    return pa.StructArray.from_arrays(arrays, names=names), {"k": "mixed", "kinds": specs}


def spec_of_type(arrow: pa.DataType) -> ColumnSpec:
    """The spec of a plain column written without one (an engine's own columns)."""
    for kind, t in _SCALAR.values():
        if arrow == t:
            return {"k": kind}
    if arrow == pa.null():
        return {"k": "none"}
    raise ValueError(f"a state column of type {arrow} has no spec saying how to read it")


def decode_column(column: pa.Array | pa.ChunkedArray, spec: ColumnSpec) -> list:
    """The Python values :func:`encode_column` made ``column`` of."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    kind = spec.get("k") if isinstance(spec, dict) else None
    decode = _DECODERS.get(kind)
    if decode is None:
        raise ValueError(f"a state column spec {spec!r} that this restream does not know")
    return decode(column, spec)


def _scalars(column: pa.Array, spec: ColumnSpec) -> list:
    kind, arrow = _SCALAR[_TYPES[spec["k"]]]
    if column.type != arrow:
        raise ValueError(f"a {kind} column of Arrow type {column.type}")
    if column.null_count == 0 and kind != "str":
        # NumPy's tolist gives Python ints, floats and bools, faster than to_pylist.
        return column.to_numpy(zero_copy_only=False).tolist()
    return column.to_pylist()


_TYPES = {"int": int, "float": float, "bool": bool, "str": str}


def _nones(column: pa.Array, spec: ColumnSpec) -> list:
    if column.null_count != len(column):
        raise ValueError("a column of None holds values")
    return [None] * len(column)


def _tuple_column(column: pa.Array, spec: ColumnSpec) -> list:
    if not pa.types.is_struct(column.type) or column.type.num_fields != len(spec["items"]):
        raise ValueError(f"a tuple column of Arrow type {column.type}")
    parts = [decode_column(column.field(i), s) for i, s in enumerate(spec["items"])]
    out = list(zip(*parts))
    if column.null_count:
        for i in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)).tolist():
            out[i] = None
    return out


def _sequence_column(column: pa.Array, spec: ColumnSpec) -> list:
    if not pa.types.is_large_list(column.type):
        raise ValueError(f"a {spec['k']} column of Arrow type {column.type}")
    build = _BUILD[spec["k"]]
    offsets = column.offsets.to_numpy().tolist()
    inner = decode_column(column.values, spec["item"])
    out = [build(inner[a:b]) for a, b in zip(offsets, offsets[1:])]
    if column.null_count:
        for i in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)).tolist():
            out[i] = None
    return out


def _mixed_column(column: pa.Array, spec: ColumnSpec) -> list:
    if not pa.types.is_struct(column.type) or column.type.field(0).name != "tag":
        raise ValueError(f"a mixed column of Arrow type {column.type}")
    tags = column.field(0).to_numpy(zero_copy_only=False)
    out: list = [None] * len(column)
    for i in range(1, column.type.num_fields):
        kind = column.type.field(i).name
        at = np.flatnonzero(tags == _KINDS.index(kind))
        child = decode_column(column.field(i).take(pa.array(at)), spec["kinds"][kind])
        for j, value in zip(at.tolist(), child):
            out[j] = value
    return out


def _json_column(column: pa.Array, spec: ColumnSpec) -> list:
    if column.type != pa.string():
        raise ValueError(f"a JSON column of Arrow type {column.type}")
    return [None if x is None else values.loads(x) for x in column.to_pylist()]


_DECODERS: dict[Any, Callable[[pa.Array, ColumnSpec], list]] = {
    "int": _scalars,
    "float": _scalars,
    "bool": _scalars,
    "str": _scalars,
    "none": _nones,
    "tuple": _tuple_column,
    "list": _sequence_column,
    "set": _sequence_column,
    "frozenset": _sequence_column,
    "mixed": _mixed_column,
    "json": _json_column,
}
