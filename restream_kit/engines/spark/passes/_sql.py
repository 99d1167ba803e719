"""Spark SQL text of the pass path: quoted column names, kinds as a list, a partition key's
columns and an Arrow type's DDL name."""

from __future__ import annotations

import ast
from typing import Any

import pyarrow as pa

__all__ = ["quoted", "unquoted", "kinds_sql", "raw_key", "ddl_type"]


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def unquoted(name: str) -> str:
    """A column name as :func:`quoted` or :func:`raw_key` give it, without the quotes."""
    if name.startswith("`") and name.endswith("`"):
        return name[1:-1].replace("``", "`")
    return name


def kinds_sql(kinds: tuple[str, ...]) -> str:
    return ", ".join("'" + k.replace("\\", "\\\\").replace("'", "\\'") + "'" for k in kinds)


def raw_key(partition: str, events: Any) -> list[str] | None:
    """The log columns a partition key is made of, when it is a column or a tuple of columns
    of one plain type each: Spark then partitions by them, and equal keys meet as in Python."""
    try:
        node = ast.parse(partition, mode="eval").body
    except SyntaxError:
        return None
    parts = node.elts if isinstance(node, ast.Tuple) else [node]
    names = []
    for part in parts:
        if not (
            isinstance(part, ast.Attribute)
            and isinstance(part.value, ast.Name)
            and part.value.id == "e"
            and part.attr in events.types
            and part.attr not in events.pickled
        ):
            return None
        names.append(quoted(part.attr))
    return names or None


_DDL = {
    pa.int8(): "TINYINT",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.float64(): "DOUBLE",
    pa.binary(): "BINARY",
    pa.int16(): "SMALLINT",
    pa.float32(): "FLOAT",
    pa.bool_(): "BOOLEAN",
}


def ddl_type(t: Any) -> str:
    """The Spark DDL name of Arrow type ``t`` (``STRING`` for any other)."""
    return _DDL.get(t, "STRING")
