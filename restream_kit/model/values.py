"""A safe, type-preserving encoding of Python values as JSON: how runs and checkpoints keep state.

``None``, ``bool``, ``int``, ``str`` and finite ``float`` are themselves in JSON. Every other
value is a JSON list whose first item is a tag saying its type:

=========  ==========================================  =====================================
tag        value                                       example
=========  ==========================================  =====================================
``t``      tuple                                       ``["t", 1, "a"]``
``l``      list                                        ``["l", 1, 2]``
``d``      dict (keys and values alternate, in order)  ``["d", "k", 1, ["t", 1, 2], 3]``
``s``      set                                         ``["s", 1, 2]``
``fs``     frozenset                                   ``["fs", 1, 2]``
``b``      bytes (base64)                              ``["b", "AAE="]``
``ba``     bytearray (base64)                          ``["ba", "AAE="]``
``f``      nan, inf, -inf                              ``["f", "nan"]``
``i``      an int too long for JSON text (hex)         ``["i", "-0x1f..."]``
``c``      complex                                     ``["c", 1.0, 2.0]``
``dt``     datetime (ISO, with its offset if any)      ``["dt", "2024-01-02T03:04:05"]``
``date``   date                                        ``["date", "2024-01-02"]``
``time``   time                                        ``["time", "03:04:05.000001"]``
``td``     timedelta (days, seconds, microseconds)     ``["td", 1, 2, 3]``
``dec``    Decimal                                     ``["dec", "1.10"]``
=========  ==========================================  =====================================

Types are matched exactly (a subclass of tuple or int is refused rather than silently turned
into its base type). Decoding builds nothing but these types, so reading a file can never run
code. Callers with values of their own (checkpoints: Arrow tables, events, merge functions)
pass a ``hook`` that turns such a value into ``(tag, payload)`` and decoders for their tags.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from collections.abc import Callable
from itertools import chain
from typing import Any

__all__ = [
    "ValueCodecError",
    "encode",
    "decode",
    "dumps",
    "loads",
    "check",
    "describe",
    "unstorable",
]

#: Ints with more bits than this are written as hex: JSON text of huge ints is refused by
#: Python's int/str conversion limit (4300 digits) and slow to parse.
_MAX_BITS = 4096

Hook = Callable[[Any], "tuple[str, Any] | None"]
Decoders = dict[str, Callable[[Any], Any]]


class ValueCodecError(ValueError):
    """A value the codec cannot encode, or a document that is not one it wrote.

    ``value`` is the offending value (for an encode) and ``path`` where it sits, e.g.
    ``[0][1]`` or ``{'k'}``.
    """

    def __init__(self, message: str, value: Any = None, path: str = ""):
        super().__init__(message)
        self.value = value
        self.path = path


def describe(value: Any) -> str:
    """A short ``type repr`` of ``value`` for error messages."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = "<unrepresentable>"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def encode(value: Any, hook: Hook | None = None) -> Any:
    """``value`` as a JSON-able structure (see the module docstring); raise ValueCodecError."""
    try:
        return _encode(value, hook, "")
    except RecursionError:
        raise ValueCodecError(f"{describe(value)} is nested too deeply to store", value) from None


def _encode(v: Any, hook: Hook | None, path: str) -> Any:
    t = type(v)
    if t is str or t is bool or v is None:
        return v
    if t is int:
        return v if v.bit_length() <= _MAX_BITS else ["i", hex(v)]
    if t is float:
        if math.isfinite(v):
            return v
        return ["f", "nan" if v != v else ("inf" if v > 0 else "-inf")]
    if t is tuple:
        if _plain(v):
            return ["t", *v]
        return ["t", *[_encode(x, hook, f"{path}[{i}]") for i, x in enumerate(v)]]
    if t is list:
        if _plain(v):
            return ["l", *v]
        return ["l", *[_encode(x, hook, f"{path}[{i}]") for i, x in enumerate(v)]]
    if t is dict:
        fast = _plain_dict(v)
        if fast is not None:
            return fast
        out: list[Any] = ["d"]
        for k, x in v.items():
            out.append(_encode(k, hook, f"{path}<key {k!r:.40}>"))
            out.append(_encode(x, hook, f"{path}[{k!r:.40}]"))
        return out
    if t is set or t is frozenset:
        tag = "s" if t is set else "fs"
        if _plain(v):
            return [tag, *v]
        return [tag, *[_encode(x, hook, f"{path}{{{x!r:.40}}}") for x in v]]
    if t is bytes:
        return ["b", base64.b64encode(v).decode("ascii")]
    if t is bytearray:
        return ["ba", base64.b64encode(bytes(v)).decode("ascii")]
    if t is complex:
        return ["c", _encode(v.real, hook, path), _encode(v.imag, hook, path)]
    if t is dt.datetime:
        return ["dt", v.isoformat()]
    if t is dt.date:
        return ["date", v.isoformat()]
    if t is dt.time:
        return ["time", v.isoformat()]
    if t is dt.timedelta:
        return ["td", v.days, v.seconds, v.microseconds]
    if t is decimal.Decimal:
        return ["dec", str(v)]
    if hook is not None:
        tagged = hook(v)
        if tagged is not None:
            tag, payload = tagged
            return [tag, payload]
    raise ValueCodecError(
        f"{describe(v)} cannot be stored (not a plain value: numbers, str, bytes, None, "
        "tuples, lists, dicts, sets, dates)",
        v,
        path,
    )


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(items: Any) -> bool:
    """Whether every item is its own JSON (so a container needs no walk): the fast path that
    keeps big states quick, checked with C-speed builtins."""
    types = set(map(type, items))
    if not types <= _SCALARS:
        return False
    if int in types:
        ints = items if len(types) == 1 else [x for x in items if type(x) is int]
        if ints and max(max(ints).bit_length(), min(ints).bit_length()) > _MAX_BITS:
            return False
    if float in types:
        floats = items if len(types) == 1 else [x for x in items if type(x) is float]
        if not all(map(math.isfinite, floats)):
            return False
    return True


def _plain_dict(d: dict) -> list | None:
    """The encoding of ``d`` when its keys (or tuples of them) and values are plain, else None."""
    keys = list(d)
    if not _plain(list(d.values())):
        return None
    if not _plain(keys):
        if set(map(type, keys)) != {tuple} or not _plain(list(chain.from_iterable(keys))):
            return None
        keys = [["t", *k] for k in keys]
    return ["d", *chain.from_iterable(zip(keys, d.values()))]


def decode(data: Any, decoders: Decoders | None = None) -> Any:
    """The value that :func:`encode` turned into ``data``; ValueCodecError on anything else."""
    try:
        return _decode(data, decoders)
    except ValueCodecError:
        raise
    except (
        TypeError,
        ValueError,
        KeyError,
        IndexError,
        RecursionError,
        decimal.InvalidOperation,
    ) as exc:
        raise ValueCodecError(f"not an encoded value ({type(exc).__name__}: {exc})") from None


_CONTAINERS: dict[str, Callable[[list], Any]] = {
    "t": tuple,
    "l": list,
    "s": set,
    "fs": frozenset,
    "d": dict,  # built from alternating keys and values in _decode
}


def _decode(x: Any, decoders: Decoders | None) -> Any:
    if type(x) is not list:
        if x is None or type(x) in (str, int, float, bool):
            return x
        raise ValueCodecError(f"not an encoded value: {describe(x)}")
    tag = x[0]
    if tag in _CONTAINERS:
        items = x[1:]
        if list in set(map(type, items)):
            items = [_decode(y, decoders) if type(y) is list else y for y in items]
        if tag == "d":
            if len(items) % 2:
                raise ValueCodecError("not an encoded value: a dict with an odd number of items")
            return dict(zip(items[::2], items[1::2]))
        return _CONTAINERS[tag](items)
    if tag == "b":
        return base64.b64decode(x[1], validate=True)
    if tag == "ba":
        return bytearray(base64.b64decode(x[1], validate=True))
    if tag == "f":
        if x[1] not in ("nan", "inf", "-inf"):
            raise ValueCodecError(f"not an encoded float: {x[1]!r}")
        return float(x[1])
    if tag == "i":
        return int(x[1], 16)
    if tag == "c":
        return complex(_decode(x[1], decoders), _decode(x[2], decoders))
    if tag == "dt":
        return dt.datetime.fromisoformat(x[1])
    if tag == "date":
        return dt.date.fromisoformat(x[1])
    if tag == "time":
        return dt.time.fromisoformat(x[1])
    if tag == "td":
        return dt.timedelta(days=x[1], seconds=x[2], microseconds=x[3])
    if tag == "dec":
        return decimal.Decimal(x[1])
    if decoders is not None and tag in decoders:
        return decoders[tag](x[1])
    raise ValueCodecError(f"not an encoded value: unknown tag {tag!r}")


def dumps(value: Any, hook: Hook | None = None) -> bytes:
    """``value`` encoded as compact JSON bytes (UTF-8)."""
    return json.dumps(
        encode(value, hook), ensure_ascii=False, allow_nan=False, separators=(",", ":")
    ).encode()


def loads(data: bytes | str, decoders: Decoders | None = None) -> Any:
    """The value :func:`dumps` wrote; ValueCodecError when ``data`` is not such JSON."""
    try:
        # parse_constant: NaN/Infinity literals are never written, so refuse them.
        doc = json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise ValueCodecError(f"not JSON: {exc}") from None
    return decode(doc, decoders)


def _refuse_constant(name: str) -> Any:
    raise ValueCodecError(f"not an encoded value: JSON constant {name}")


def check(value: Any) -> None:
    """Raise ValueCodecError when ``value`` cannot be encoded (what :func:`encode` would)."""
    encode(value)


def unstorable(store: dict) -> tuple[Any, str, Any, ValueCodecError] | None:
    """``(key, "key"|"value", the object, the error)`` for the entry of ``store`` that the
    codec cannot hold, or None. Of several, the one whose key has the smallest ``repr``, so
    that every engine names the same key whatever order its dict is in."""
    found = None
    for key, value in store.items():
        for what, obj in (("key", key), ("value", value)):
            try:
                check(obj)
            except ValueCodecError as exc:
                if found is None or repr(key) < repr(found[0]):
                    found = (key, what, obj, exc)
                break
    return found
