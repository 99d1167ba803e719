"""The one column evaluator of lowered code: lowered expressions as polars expressions.

:mod:`restream_kit.compiler.lower` admits only expressions whose evaluation as columns cannot
differ from Python's; this module is that evaluation, shared by the Spark engine's prefix path
(``engines.spark._columnar``, over an epoch's events) and the re-run of changed stages
(``iterate._rerun_columns``, over the values recorded probes serve). Each user says what types
its event fields and reads have and puts the reads' values in the columns
:func:`read_column` names; the operators and Python's truth rules are written here once.

What Python means, as columns:

- an event field as Python holds it: integers in 64 bits, floats in double precision;
- a constant typed as Python types it (``True`` is a bool, not an int);
- ``+ - *`` and unary ``-`` as polars computes them (lowering has ruled out None, overflow and
  inexact conversions between integers and floats);
- comparisons as polars computes them, except with NaN: polars orders NaN above every number
  and equal to itself, where Python's ``==``, ``<``, ``<=``, ``>``, ``>=`` with NaN are false
  and ``!=`` is true;
- ``bool(x)``: a bool's None is false, a string is true when not empty, a number when not 0
  (NaN is true).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from .lower import Arith, Cmp, Col, Expr, Lit, Logic, Neg, Not, ReadOf, _lit

__all__ = ["ColumnEvaluator", "DTYPES", "read_column", "type_class"]

#: The polars type of each type class lowering knows.
DTYPES: dict[str, Any] = {
    "int": pl.Int64,
    "float": pl.Float64,
    "bool": pl.Boolean,
    "str": pl.String,
}

_COMPARE = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}
_ARITH = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def read_column(site: int) -> str:
    """The column holding read site ``site``'s values (never an event field: not a name)."""
    return f"#read{site}"


def type_class(dtype: Any) -> str | None:
    """The type class of a polars type ("int", "float", "bool", "str"), None for others."""
    if dtype.is_integer():
        return "int"
    if dtype.is_float():
        return "float"
    if dtype == pl.Boolean:
        return "bool"
    if dtype == pl.String:
        return "str"
    return None


class ColumnEvaluator:
    """Lowered expressions as polars expressions over a frame of events.

    ``fields`` gives each event field's type class, ``reads`` each read site's; the frame
    holds the fields by name and each read's values in :func:`read_column`."""

    def __init__(self, fields: Mapping[str, str], reads: Mapping[int, str]):
        self.fields = fields
        self.reads = reads

    def type_of(self, x: Expr) -> str:
        """The type class of ``x``'s values."""
        if isinstance(x, Col):
            return self.fields[x.name]
        if isinstance(x, Lit):
            return _lit(x.value).type
        if isinstance(x, ReadOf):
            return self.reads[x.site]
        if isinstance(x, Neg):
            return self.type_of(x.operand)
        if isinstance(x, Arith):
            both = {self.type_of(x.left), self.type_of(x.right)}
            return "int" if both == {"int"} else "float"
        return "bool"  # Cmp, Logic, Not

    def value(self, x: Expr) -> pl.Expr:
        """``x`` at every event."""
        if isinstance(x, Col):
            return pl.col(x.name).cast(DTYPES[self.fields[x.name]])
        if isinstance(x, Lit):
            return pl.lit(x.value, dtype=DTYPES[_lit(x.value).type])
        if isinstance(x, ReadOf):
            return pl.col(read_column(x.site))
        if isinstance(x, Neg):
            return -self.value(x.operand)
        if isinstance(x, Arith):
            return _ARITH[x.op](self.value(x.left), self.value(x.right))
        if isinstance(x, Cmp):
            return self.compare(x)
        if isinstance(x, Logic):
            parts = [self.truth(o) for o in x.operands]
            out = parts[0]
            for p in parts[1:]:
                out = (out & p) if x.op == "and" else (out | p)
            return out
        if isinstance(x, Not):
            return ~self.truth(x.operand)
        raise TypeError(x)

    def compare(self, x: Cmp) -> pl.Expr:
        a, b = self.value(x.left), self.value(x.right)
        out = _COMPARE[x.op](a, b)
        nans = [e.is_nan() for e, t in ((a, x.left), (b, x.right)) if self.type_of(t) == "float"]
        if not nans:
            return out
        nan = nans[0] if len(nans) == 1 else nans[0] | nans[1]
        # NaN is unequal to everything and ordered against nothing, in Python.
        return (out | nan) if x.op == "!=" else (out & ~nan)

    def truth(self, x: Expr | None) -> pl.Expr:
        """Python's ``bool(x)`` at every event (true for no condition)."""
        if x is None:
            return pl.lit(True)
        t = self.type_of(x)
        e = self.value(x)
        if t == "bool":
            return e.fill_null(False)
        if t == "str":
            return e.str.len_bytes() > 0
        return e != 0
