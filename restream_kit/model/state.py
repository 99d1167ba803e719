"""State declarations: the keyed state that handlers read and write.

A declaration only names a piece of state and its default; the engines give it storage.
Inside handlers the compiler turns every access into a direct dictionary operation, so
none of the methods below run during a replay. Outside a replay they explain that.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = ["State", "Map", "Counter", "Value"]


class State:
    """Base of the state declarations. ``name`` is set when the program is loaded."""

    kind: ClassVar[str] = "state"

    def __init__(self, default: Any = None):
        self.default = default
        self.name: str | None = None

    def __repr__(self) -> str:
        return f"state.{type(self).__name__}(default={self.default!r})"

    def _outside(self, *_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError(
            f"state {self.name or ''} is only readable and writable inside handlers during a replay"
        )

    __getitem__ = __setitem__ = __delitem__ = __contains__ = _outside
    get = set = add = merge = delete = _outside


class Map(State):
    """Keyed state, one value per key; a key never written reads as ``default``."""

    kind = "map"


class Counter(Map):
    """A Map of numbers (default 0) whose updates are merges: ``+=``, ``-=``, ``add``."""

    kind = "counter"

    def __init__(self, default: float = 0):
        super().__init__(default)


class Value(State):
    """A single value with no key: read ``v.value``, write ``v.value = x`` or ``v.value += d``."""

    kind = "value"

    @property
    def value(self) -> Any:
        return self._outside()

    @value.setter
    def value(self, _new: Any) -> None:
        self._outside()
