"""Key expressions over the log's events, computed once per replay: in Spark SQL when they
are plain columns, constants and tuples of them (:func:`jvm_key`), in Python otherwise
(:class:`KeysTask`). Both give ``_codec.encode_key``'s string, so Spark partitions and sorts
on keys exactly as Python's dicts tell them apart.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from ._codec import encode_key
from ._events import EventsTable
from ._faults import inject_fault
from ._program_ref import ProgramRef, column_values, event_type, key_function, load_program

__all__ = ["jvm_key", "KeysSpec", "KeysTask"]


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def jvm_key(expr: str, events: EventsTable) -> str | None:
    """Spark SQL computing ``encode_key`` of ``expr`` over the event, or None when the
    expression is not plain columns, constants and tuples of them."""
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None
    fields = set(events.event_fields)

    def text(value: str) -> str:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

    def conv(n: ast.AST) -> str | None:
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "e":
            if n.attr not in fields or n.attr in events.pickled:
                return None
            typ = events.types[n.attr]
            c = _q(n.attr)
            if pa.types.is_integer(typ):
                body = f"concat('i', CAST({c} AS STRING), ';')"
            elif pa.types.is_boolean(typ):
                body = f"concat('i', CAST(CAST({c} AS INT) AS STRING), ';')"
            elif pa.types.is_string(typ):
                body = f"concat('s', CAST(char_length({c}) AS STRING), ':', {c})"
            else:
                return None
            return f"(CASE WHEN {c} IS NULL THEN 'N' ELSE {body} END)"
        if isinstance(n, ast.Constant):
            v = n.value
            if v is None:
                return "'N'"
            if type(v) is int:
                return text(f"i{v};")
            if type(v) is str:
                return text(f"s{len(v)}:{v}")
            return None
        if isinstance(n, ast.Tuple):
            parts = [conv(elt) for elt in n.elts]
            if any(p is None for p in parts):
                return None
            return f"concat({', '.join([text(f't{len(parts)}:'), *parts])})"
        return None

    return conv(node)


@dataclass(frozen=True)
class KeysSpec:
    """Key expressions to evaluate per event: (output column, expression, kinds or None)."""

    program: ProgramRef
    columns: tuple[str, ...]
    pickled_columns: frozenset[str]
    keys: tuple[tuple[str, str, tuple[str, ...] | None], ...]
    passthrough: tuple[str, ...]


class KeysTask:
    """Append the encoded value of each key expression to each event (None where it raises:
    the handler that reads under that key raises it itself, at its place)."""

    def __init__(self, spec: KeysSpec):
        self.spec = spec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        spec = self.spec
        inject_fault("keys")
        program = load_program(spec.program)
        fns = [(col, key_function(expr, program), kinds) for col, expr, kinds in spec.keys]
        make = event_type(spec.columns)
        for batch in batches:
            cols = [column_values(batch, c, c in spec.pickled_columns) for c in spec.columns]
            events = [tuple.__new__(make, row) for row in zip(*cols)]
            arrays = [batch.column(c) for c in spec.passthrough]
            for _col, fn, kinds in fns:
                values = []
                for ev in events:
                    if kinds is not None and ev[2] not in kinds:
                        values.append(None)
                        continue
                    try:
                        values.append(encode_key(fn(ev)))
                    except Exception:  # noqa: BLE001 - the handler raises it itself, if it reads
                        values.append(None)
                arrays.append(pa.array(values, pa.string()))
            names = list(spec.passthrough) + [col for col, _, _ in spec.keys]
            yield pa.RecordBatch.from_arrays(arrays, names=names)
