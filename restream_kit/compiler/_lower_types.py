"""What lowering knows of values: the log's columns (:class:`ColumnFacts`), each expression's
type, nullability and integer bound (:class:`_Typed`, :class:`_Typer`), and the error that
stops lowering (:class:`NotLowerable`) when column evaluation could get a value wrong."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ._lowered import Arith, Cmp, Col, Expr, Lit, Logic, LoweredState, Neg, Not, ReadOf

if TYPE_CHECKING:
    from .lower import _Lowerer

__all__ = ["FLOAT_EXACT", "INT64_SAFE", "ColumnFacts", "NotLowerable", "column_facts"]

INT64_SAFE = 2**62  # bounds below this never overflow int64 after one more + or -
FLOAT_EXACT = 2**53  # integers below this convert to float exactly


class NotLowerable(Exception):
    """The program (for this log) has something column evaluation could get wrong."""


@dataclass
class _Typed:
    """What lowering knows of an expression: type class, may it be None, integer bound."""

    expr: Expr
    type: str  # "int", "float", "bool", "str"
    nullable: bool = False
    bound: int | None = None  # for ints: |value| <= bound
    range: tuple[int, int] | None = None  # for int columns: (min, max)


@dataclass(frozen=True)
class ColumnFacts:
    """What lowering needs of a log column, without its rows: its type, whether some row is
    null, and an integer column's (min, max) (``(0, 0)`` when it has no value)."""

    type: pa.DataType
    nullable: bool
    range: tuple[int, int] = (0, 0)


def column_facts(table: pa.Table) -> dict[str, ColumnFacts]:
    """The :class:`ColumnFacts` of every column of ``table``."""
    out = {}
    for name in table.column_names:
        col = table.column(name)
        t = col.type
        lo_hi = (0, 0)
        if pa.types.is_integer(t) and t != pa.uint64() and len(col):
            mm = pc.min_max(col).as_py()
            lo_hi = (mm["min"] or 0, mm["max"] or 0)
        out[name] = ColumnFacts(t, col.null_count > 0, lo_hi)
    return out


def _column_types(facts: dict[str, ColumnFacts]) -> dict[str, _Typed]:
    """The typed column of each log column lowering can read (the others are left out)."""
    out = {}
    for name, fact in facts.items():
        t, nullable = fact.type, fact.nullable
        if pa.types.is_boolean(t):
            out[name] = _Typed(Col(name), "bool", nullable)
        elif pa.types.is_integer(t) and t != pa.uint64():
            lo, hi = fact.range
            out[name] = _Typed(Col(name), "int", nullable, max(abs(lo), abs(hi)), (lo, hi))
        elif pa.types.is_floating(t):
            out[name] = _Typed(Col(name), "float", nullable)
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            out[name] = _Typed(Col(name), "str", nullable)
    return out


def _lit(value: Any) -> _Typed:
    """A constant's type (NotLowerable for one columns cannot hold)."""
    if isinstance(value, bool):
        return _Typed(Lit(value), "bool")
    if isinstance(value, int):
        return _Typed(Lit(value), "int", bound=abs(value))
    if isinstance(value, float):
        return _Typed(Lit(value), "float")
    if isinstance(value, str):
        return _Typed(Lit(value), "str")
    raise NotLowerable(f"constant {value!r}")


# -- typing: every expression's type, nullability and bound --------------------------------


class _Typer:
    """Types expressions once the writes are known; raises NotLowerable on any doubt."""

    def __init__(self, low: _Lowerer, states: dict[str, LoweredState], read_state: dict[int, str]):
        self.low = low
        self.states = states
        self.read_state = read_state
        self.state_types: dict[str, _Typed] = {}

    def of(self, x: Expr) -> _Typed:
        if isinstance(x, Col):
            return self.low.columns[x.name]
        if isinstance(x, Lit):
            return _lit(x.value)
        if isinstance(x, ReadOf):
            return self.state_types[self.read_state[x.site]]
        if isinstance(x, Neg):
            t = self.of(x.operand)
            self.numeric(t)
            return _Typed(x, t.type, False, t.bound)
        if isinstance(x, Arith):
            a, b = self.of(x.left), self.of(x.right)
            self.numeric(a)
            self.numeric(b)
            if a.type == b.type == "int":
                bound = a.bound * b.bound if x.op == "*" else a.bound + b.bound
                if bound >= INT64_SAFE:
                    raise NotLowerable("integer arithmetic that could overflow 64 bits")
                return _Typed(x, "int", False, bound)
            self.exact(a)
            self.exact(b)
            return _Typed(x, "float")
        if isinstance(x, Cmp):
            a, b = self.of(x.left), self.of(x.right)
            if a.nullable or b.nullable:
                raise NotLowerable("comparison with a value that may be None")
            if {a.type, b.type} <= {"int", "float"}:
                if a.type != b.type:
                    self.exact(a)
                    self.exact(b)
            elif a.type != b.type or (a.type == "bool" and x.op not in ("==", "!=")):
                raise NotLowerable(f"comparison of {a.type} and {b.type}")
            return _Typed(x, "bool")
        if isinstance(x, Logic):
            for o in x.operands:
                self.truth(self.of(o))
            return _Typed(x, "bool")
        if isinstance(x, Not):
            self.truth(self.of(x.operand))
            return _Typed(x, "bool")
        raise NotLowerable(type(x).__name__)

    def numeric(self, t: _Typed) -> None:
        if t.type not in ("int", "float") or t.nullable:
            raise NotLowerable(
                f"arithmetic on a {t.type}{' that may be None' if t.nullable else ''}"
            )

    def exact(self, t: _Typed) -> None:
        if t.type == "int" and (t.bound is None or t.bound > FLOAT_EXACT):
            raise NotLowerable("an integer that might not convert to float exactly")

    def truth(self, t: _Typed) -> None:
        if t.nullable and t.type != "bool":
            raise NotLowerable("truth of a value that may be None")
