"""A log source's time column as int64 milliseconds since the epoch: integers as they are,
timestamps and dates converted, strings parsed (ISO 8601), with one clear error naming the
first value that is none of these."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from ..model.errors import LogError

__all__ = ["_ts_to_ms", "_looks_like_time", "_first_true"]

_TIME_NAME = re.compile(r"(^|_)(time|timestamp|datetime|date|epoch|when|at|ms|millis)($|_)", re.I)


def _looks_like_time(col: pa.ChunkedArray, name: str) -> bool:
    """A temporal column, a column of ISO-8601 strings, or an integer column named like time."""
    t = col.type
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return True
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        first = next((v for v in col.drop_null().slice(0, 1).to_pylist()), None)
        return first is not None and _parse_ms(first) is not None and not first.isdigit()
    return pa.types.is_integer(t) and _TIME_NAME.search(name) is not None


#: The types a string column of times is read as, in turn: integer milliseconds, then ISO-8601
#: wall times (read as UTC), then ISO-8601 times with a zone (``Z``, ``+02:00``).
_STRING_TIMES = (pa.int64(), pa.timestamp("ns"), pa.timestamp("ns", tz="UTC"))


def _as_ms(values: pa.ChunkedArray | pa.Array, target: pa.DataType) -> pa.ChunkedArray:
    """Strings cast to ``target`` (one of :data:`_STRING_TIMES`) as int64 milliseconds;
    ArrowInvalid when one does not parse."""
    cast = pc.cast(values, target)
    if pa.types.is_integer(target):
        return cast
    return pc.cast(pc.cast(cast, pa.timestamp("ms", tz=target.tz), safe=False), pa.int64())


def _parse_ms(text: str) -> int | None:
    """One string as milliseconds (None when it is no time)."""
    for target in _STRING_TIMES:
        try:
            return _as_ms(pa.array([text]), target)[0].as_py()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    return None


def _first_true(mask: pa.ChunkedArray | pa.Array) -> int:
    return pc.index(mask, True).as_py()


def _ts_to_ms(col: pa.ChunkedArray, label: str) -> pa.ChunkedArray:
    nulls = col.null_count
    if nulls:
        raise LogError("ts is null", path=label, column="ts", row=_first_true(pc.is_null(col)))
    t = col.type
    if pa.types.is_integer(t):
        return pc.cast(col, pa.int64())
    if pa.types.is_timestamp(t):  # finer than milliseconds: cut to the millisecond
        return pc.cast(pc.cast(col, pa.timestamp("ms", tz=t.tz), safe=False), pa.int64())
    if pa.types.is_date(t):
        return pc.cast(pc.cast(pc.cast(col, pa.date32()), pa.timestamp("ms")), pa.int64())
    if pa.types.is_floating(t):
        frac = pc.not_equal(pc.floor(col), col)
        if pc.any(frac).as_py():
            raise LogError(
                "ts must be whole milliseconds, found a fraction",
                path=label,
                column="ts",
                row=_first_true(frac),
            )
        return pc.cast(col, pa.int64())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _strings_to_ms(col, label)
    raise LogError(f"ts has type {t}, which cannot be ordered as time", path=label, column="ts")


def _strings_to_ms(col: pa.ChunkedArray, label: str) -> pa.ChunkedArray:
    """Times written as text: integer milliseconds or ISO-8601, the whole column at once when
    it is all of one form, value by value (naming the first bad row) when not."""
    for target in _STRING_TIMES:
        try:
            return _as_ms(col, target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    out = []
    for row, text in enumerate(col.to_pylist()):
        ms = _parse_ms(text)
        if ms is None:
            raise LogError(
                f"ts {text!r} is neither integer milliseconds nor an ISO-8601 time",
                path=label,
                column="ts",
                row=row,
            )
        out.append(ms)
    return pa.chunked_array([pa.array(out, pa.int64())])
