"""How state keys cross the JVM: as strings.

A state key becomes a string that is equal for keys that Python's dicts treat as one
(``1``, ``1.0`` and ``True`` all encode as ``i1;``), so that Spark can partition, sort and
join on it. Every part says its type and is self-delimiting, which makes the encoding
injective and decodable:

- ``N`` None; ``i<digits>;`` an int, a bool or any number equal to one (``2.0``,
  ``Decimal("2")``); ``f<repr>;`` another number equal to a float;
- ``s<length>:<text>`` a str; ``b<length>:<hex>`` bytes;
- ``t<n>:`` then the n encoded items, a tuple; ``z<n>:`` then the sorted encoded items, a
  frozenset; ``p<length>:<base64 pickle>`` anything else (so keys of other types that
  compare equal to one another, such as ``1 + 0j`` and ``1``, encode differently: a limit).

The same strings are built by Spark SQL for keys that are plain int, bool or string columns of
the event, or tuples of them (see ``_keys.jvm_key``), so such keys are never computed in
Python. ``MISSING`` is the value of a key that is not there.
"""

from __future__ import annotations

import base64
import numbers
import pickle
from typing import Any

__all__ = ["encode_key", "decode_key", "MISSING"]


class _Missing:
    """The value of a key that is not there (deleted, or never written)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"


MISSING = _Missing()


def encode_key(key: Any) -> str:
    """The string form of a state key (see the module docstring)."""
    t = type(key)
    if t is int:
        return f"i{key};"
    if t is str:
        return f"s{len(key)}:{key}"
    if t is tuple:
        return f"t{len(key)}:" + "".join([encode_key(k) for k in key])
    if key is None:
        return "N"
    if t is bool:
        return "i1;" if key else "i0;"
    if t is float:
        if key.is_integer():
            return f"i{int(key)};"
        return f"f{key!r};"
    if isinstance(key, int):
        return f"i{int(key)};"
    if isinstance(key, numbers.Number):
        # Decimal("2"), Fraction(3, 2), numpy scalars: equal keys must meet.
        try:
            whole = int(key)
            if whole == key:
                return f"i{whole};"
            real = float(key)
            if real == key:
                return f"f{real!r};"
        except (TypeError, ValueError, OverflowError, ArithmeticError):
            pass
    if t is bytes:
        return f"b{len(key)}:{key.hex()}"
    if t is frozenset:
        parts = sorted(encode_key(k) for k in key)
        return f"z{len(parts)}:" + "".join(parts)
    data = base64.b64encode(pickle.dumps(key, protocol=5)).decode("ascii")
    return f"p{len(data)}:{data}"


def decode_key(text: str) -> Any:
    """The key that :func:`encode_key` turned into ``text``."""
    if text[0] == "i":
        return int(text[1:-1])
    if text[0] == "s" and text.find(":") + 1 + int(text[1 : text.find(":")]) == len(text):
        return text[text.find(":") + 1 :]
    key, end = _decode(text, 0)
    if end != len(text):
        raise ValueError(f"trailing characters in key {text!r}")
    return key


def _decode(text: str, pos: int) -> tuple[Any, int]:
    tag = text[pos]
    if tag == "N":
        return None, pos + 1
    if tag in "if":
        end = text.index(";", pos)
        body = text[pos + 1 : end]
        return (int(body) if tag == "i" else float(body)), end + 1
    colon = text.index(":", pos)
    n = int(text[pos + 1 : colon])
    start = colon + 1
    if tag == "s":
        return text[start : start + n], start + n
    if tag == "b":
        return bytes.fromhex(text[start : start + 2 * n]), start + 2 * n
    if tag == "p":
        return pickle.loads(base64.b64decode(text[start : start + n])), start + n
    if tag in "tz":
        items = []
        pos = start
        for _ in range(n):
            item, pos = _decode(text, pos)
            items.append(item)
        return (tuple(items) if tag == "t" else frozenset(items)), pos
    raise ValueError(f"bad key encoding {text!r} at {pos}")
