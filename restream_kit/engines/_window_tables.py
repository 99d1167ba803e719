"""The serial engine's output tables, where native windows left their rows as columns.

A table whose rows all came from closing windows (``runtime._window_rows.WindowRows``) is
built from their columns at once, exactly as ``build_table`` builds it from the rows (the same
columns, order and types); any other table, or one whose values ``build_table`` would treat
specially (a value Arrow cannot type, booleans among numbers), is built by ``build_table``
from the rows as tuples, with its errors.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain, repeat

import pyarrow as pa

from ..io.result import build_table
from ..runtime.windows import ROW_FIELDS, WindowRows

__all__ = ["emitted_table", "as_rows"]


def emitted_table(name: str, rows: list, blocked: bool) -> pa.Table:
    """Output table ``name`` from its list of rows; ``blocked``: whether windows may have put
    :class:`WindowRows` in it."""
    if not blocked:
        return build_table(name, rows)
    if rows and all(type(r) is WindowRows for r in rows):
        table = _from_columns(rows)
        if table is not None:
            return table
    return build_table(name, as_rows(rows))


def as_rows(rows: Iterable) -> list[tuple]:
    """``rows`` with every :class:`WindowRows` written out as its row tuples."""
    out: list[tuple] = []
    for r in rows:
        if type(r) is WindowRows:
            out.extend(r.rows())
        else:
            out.append(r)
    return out


def _from_columns(blocks: list[WindowRows]) -> pa.Table | None:
    """The table of rows that all came from windows, or None where ``build_table`` must
    decide (a field Arrow cannot type as it is, or booleans, which it checks for numbers)."""
    parts = [b.columns() for b in blocks]

    def column(name: str) -> list:
        return list(
            chain.from_iterable(
                p[name] if isinstance(p[name], (list, tuple)) else repeat(p[name], p["n"])
                for p in parts
            )
        )

    handlers = list(chain.from_iterable(repeat(b.handler, b.n) for b in blocks))
    columns = {
        "lsn": pa.array(column("lsn"), pa.int64()),
        "ts": pa.array(column("ts"), pa.int64()),
        "handler": pa.array(handlers, pa.string()),
        "seq": pa.array(column("seq"), pa.int64()),
    }
    for name in ROW_FIELDS:
        try:
            array = pa.array(column(name))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            return None
        if pa.types.is_boolean(array.type):
            return None
        columns[name] = array
    return pa.table(columns)
