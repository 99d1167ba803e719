"""Lowered code: the column expressions a lowered handler is made of, and what
:func:`restream_kit.compiler.lower.lower` makes of a program (its reads, writes, emits and
states, with their rounds). Frozen values, read by the column evaluator and the engines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "Arith",
    "Binary",
    "Cmp",
    "Col",
    "EmitSite",
    "Expr",
    "Lit",
    "Logic",
    "Lowered",
    "LoweredRead",
    "LoweredState",
    "Neg",
    "Not",
    "ReadOf",
    "Unary",
    "Write",
]


# -- expressions --------------------------------------------------------------------------


@dataclass(frozen=True)
class Col:
    """An event field."""

    name: str


@dataclass(frozen=True)
class Lit:
    """A constant (int, float, bool or str)."""

    value: Any


@dataclass(frozen=True)
class ReadOf:
    """The value of read site ``site`` (an index into :attr:`Lowered.reads`)."""

    site: int


@dataclass(frozen=True)
class Binary:
    """An operator on two expressions (:class:`Arith`, :class:`Cmp`)."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Unary:
    """An operator on one expression (:class:`Neg`, :class:`Not`)."""

    operand: Expr


class Arith(Binary):
    """``left op right``, ``op`` one of "+", "-", "*"."""


class Neg(Unary):
    """``-operand``."""


class Cmp(Binary):
    """``left op right``, ``op`` one of "==", "!=", "<", "<=", ">", ">="."""


@dataclass(frozen=True)
class Logic:
    """``and`` / ``or`` of conditions (Python truthiness of each operand)."""

    op: str
    operands: tuple[Expr, ...]


class Not(Unary):
    """``not operand``: the negation of its truth."""


Expr = Col | Lit | ReadOf | Arith | Neg | Cmp | Logic | Not


# -- what handlers do ---------------------------------------------------------------------


@dataclass(frozen=True)
class LoweredRead:
    """A read of ``state[key]`` at operation ``n`` of handler ``handler`` (index), lowered:
    its key is expressions over the event's columns that an engine can evaluate, where the
    plan's :class:`~restream_kit.planner.ir.Access` holds the key's canonical source."""

    index: int
    state: str
    key: tuple[Expr, ...]
    handler: int
    n: int


@dataclass(frozen=True)
class Write:
    """``state[key] += value`` (merge), ``= value`` (set) or ``del`` (delete), when ``when``."""

    state: str
    op: str
    key: tuple[Expr, ...]
    value: Expr | None
    when: Expr | None
    handler: int
    n: int


@dataclass(frozen=True)
class EmitSite:
    """``emit(table, **fields)`` at operation ``n`` of handler ``handler``, when ``when``."""

    table: str
    fields: tuple[tuple[str, Expr], ...]
    when: Expr | None
    handler: int
    n: int
    level: int = 0


@dataclass(frozen=True)
class LoweredState:
    """A lowered state: ``kind`` "merge" (sums) or "set" (last write), its default, key shape."""

    name: str
    kind: str
    default: Any
    tuple_key: bool
    arity: int
    level: int
    value_type: str
    #: For keys of several integers with known ranges: ``(lowest, span)`` per position, so that
    #: ``sum((k_i - lowest_i) * stride_i)`` is one 64-bit key (joins on one column are faster).
    packing: tuple[tuple[int, int], ...] | None = None


@dataclass(frozen=True)
class Lowered:
    """A whole program lowered: handlers' kinds, reads, writes, emits, states by level."""

    kinds: tuple[tuple[str, ...], ...]  # per handler index
    handler_names: tuple[str, ...]
    reads: tuple[LoweredRead, ...]
    writes: tuple[Write, ...]
    emits: tuple[EmitSite, ...]
    states: dict[str, LoweredState]
    ops_per_handler: int

    @property
    def levels(self) -> int:
        """How many evaluation rounds the program needs (one per state level, and emits)."""
        top = [s.level for s in self.states.values() if self.writes_of(s.name)]
        top += [e.level for e in self.emits]
        return max(top, default=0) + 1

    def writes_of(self, state: str) -> tuple[Write, ...]:
        return tuple(w for w in self.writes if w.state == state)
