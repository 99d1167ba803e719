"""The stores a pass's handlers write through, when a write must do more than a dict does.

- :class:`JournalStore`: under ``on_error`` skip or quarantine, every change is journaled so
  that a handler run that raises can be undone;
- :class:`RecordingStore`: a state held here that later passes also fold; every change is
  sent to them too;
- :class:`BlindStore`: a state written here but held by a later pass; every write becomes a
  row for it, and ``m[k] += x`` (whose old value lives there) a ``("bin", op, x)`` row.
"""

from __future__ import annotations

import operator
from typing import Any

from ....runtime.guarded import JOURNAL_ABSENT
from ....runtime.semantics import apply_write

__all__ = ["JournalStore", "RecordingStore", "BlindStore", "apply_op", "carried"]


#: The operators of ``m[k] op= x`` on a blind write: symbol -> the name of its dunder method.
_OPERATORS = dict(
    zip(
        "+ - * / // % ** | & ^ << >> @".split(),
        "add sub mul truediv floordiv mod pow or and xor lshift rshift matmul".split(),
    )
)
_BINOPS = {symbol: getattr(operator, f"__{name}__") for symbol, name in _OPERATORS.items()}


class _Delta:
    """``old <op> operand`` for a key whose old value lives in another pass."""

    __slots__ = ("op", "operand")

    def __init__(self, op: str, operand: Any):
        self.op = op
        self.operand = operand


class _Hole:
    """The unknown old value of a blind write: arithmetic on it makes a :class:`_Delta`."""

    __slots__ = ()


def _binop(symbol: str):
    def method(self: _Hole, other: Any) -> _Delta:
        return _Delta(symbol, other)

    return method


for _symbol, _name in _OPERATORS.items():
    setattr(_Hole, f"__{_name}__", _binop(_symbol))


_HOLE = _Hole()


class _PassStore(dict):
    """A state's store in a pass: the pass's runtime ``rt`` and the state's name."""

    def __init__(self, rt: Any, state: str):
        super().__init__()
        self.rt = rt
        self.state = state

    def __delitem__(self, key: Any) -> None:
        self.pop(key)


class JournalStore(_PassStore):
    """A state held here, under ``on_error`` skip or quarantine: every change is journaled
    (store, key, old value) so that a handler run that raises can be undone."""

    def __setitem__(self, key: Any, value: Any) -> None:
        self.rt.journal.append((self, key, dict.get(self, key, JOURNAL_ABSENT)))
        dict.__setitem__(self, key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        self.rt.journal.append((self, key, dict.get(self, key, JOURNAL_ABSENT)))
        return dict.pop(self, key, *default)


class RecordingStore(_PassStore):
    """A state held here that later passes also fold: every change is also sent to them."""

    def __setitem__(self, key: Any, value: Any) -> None:
        if self.rt.journal is not None:
            self.rt.journal.append((self, key, dict.get(self, key, JOURNAL_ABSENT)))
        dict.__setitem__(self, key, value)
        self.rt.ship(self.state, key, ("set", value), None, self.rt.feeds[self.state])

    def pop(self, key: Any, *default: Any) -> Any:
        if self.rt.journal is not None:
            self.rt.journal.append((self, key, dict.get(self, key, JOURNAL_ABSENT)))
        self.rt.ship(self.state, key, ("del",), None, self.rt.feeds[self.state])
        return dict.pop(self, key, *default)


class BlindStore(_PassStore):
    """A state written here but held by a later pass: every write becomes a row for it."""

    def get(self, key: Any, default: Any = None) -> Any:
        return _HOLE

    def __setitem__(self, key: Any, value: Any) -> None:
        targets = self.rt.spec.blind[self.state]
        if type(value) is _Delta:
            self.rt.ship(self.state, key, ("bin", value.op, value.operand), None, targets)
        else:
            self.rt.ship(self.state, key, ("set", value), None, targets)

    def pop(self, key: Any, *default: Any) -> None:
        self.rt.ship(self.state, key, ("del",), None, self.rt.spec.blind[self.state])

    def __contains__(self, key: Any) -> bool:
        raise RuntimeError(f"state {self.state!r} is read where the plan said it is only written")


def carried(op: str, arg: Any) -> tuple:
    """A handler's write (``op`` of ``set``, ``add``, ``merge``, ``delete``) as rows carry
    it to other passes and :func:`apply_op` applies it: ``(op, arg)``, or ``("del",)``."""
    return (op, arg) if op in _CARRIED else ("del",)


_CARRIED = frozenset({"set", "add", "merge"})


def apply_op(d: dict, default: Any, key: Any, op: tuple, raw: bool = False) -> None:
    """Apply a write ``op`` as rows carry it (``("add", x)``, ``("del",)``, a blind
    ``("bin", symbol, x)``...) to ``key`` of store ``d``, by the serial write rules
    (``runtime.semantics.apply_write``); ``raw``: without sending it on (it came from
    another pass, which sent it to every pass that folds it)."""
    what = op[0]
    if what == "bin":  # ``old <symbol> x``: a merge with that function
        binop, operand = _BINOPS[op[1]], op[2]
        apply_write(d, default, "merge", key, lambda old: binop(old, operand), raw)
    else:
        apply_write(d, default, what, key, op[1] if len(op) > 1 else None, raw)
