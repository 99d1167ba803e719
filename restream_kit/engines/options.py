"""Each engine's options as one frozen dataclass, built once and checked before a replay starts.

A replay's keyword options (``rk.replay(..., epoch="1h", master="local[2]")``, the command
line's flags, a cell's arguments) become one :class:`SerialOptions` or :class:`SparkOptions`
by :meth:`EngineOptions.of`, which takes what the environment says where the arguments say
nothing (``$RESTREAM_SPARK_PATH``), and refuses in one line, naming the option:

- a name that is no engine's option (``bogus=1``), or an option the engine has retired;
- a value of the wrong type (``partitions="two"``) or out of its range (``epoch="banana"``,
  ``path="sideways"``).

An option of another engine is set aside, unchecked (``master=`` on the serial engine), so
that one set of options replays on every engine (the test matrix, a cell switching
``--engine``). ``None`` means "not given". The Spark settings (``master``, ``conf``,
``executor_wait``) are kept as given: the session resolves them with the environment and the
profile file in one place (``restream_kit.io.config.resolve``), and only when it starts one.

Engines read the options' attributes; an engine another package registers without an options
type of its own gets its keywords as given, with the options every engine takes checked
(:meth:`EngineOptions.common`).
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar, Union

from ..io._every import check_every
from ..io.epochs import parse_epoch
from ..runtime.quarantine import check_on_error
from ._contract import EngineUnsupported

__all__ = [
    "EngineOptions",
    "OptionError",
    "SerialOptions",
    "SparkOptions",
    "SPARK_PATHS",
    "known_options",
]

Opts = TypeVar("Opts", bound="EngineOptions")

#: Every options class, so that an option of another engine is known (set aside, not refused).
_CLASSES: list[type[EngineOptions]] = []


class OptionError(EngineUnsupported):
    """An option an engine does not have, or a value it cannot take; names the option."""


@dataclasses.dataclass(frozen=True)
class EngineOptions:
    """The options every engine takes (see ``restream_kit.api.replay``)."""

    #: The engine these options are for (named in errors).
    engine: ClassVar[str] = "any"
    #: Options an engine no longer has -> why; refused in one line.
    retired: ClassVar[dict[str, str]] = {}

    epoch: int | str | None = None
    cancel: Any = None
    on_error: str = "stop"
    #: A directory, or a checkpoint an engine opened and hands another (``load``/``commit``).
    checkpoint: Any = None
    checkpoint_every: int | str | None = None
    resume: bool = False
    #: A checkpoint directory, or (directory, epoch).
    start_from: Any = None
    history: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _CLASSES.append(cls)

    def __post_init__(self) -> None:
        # Said as the engines always said them (a RestreamError naming the option).
        parse_epoch(self.epoch)
        check_on_error(self.on_error)
        check_every(self.checkpoint_every, self.checkpoint)

    @classmethod
    def of(cls: type[Opts], given: Mapping[str, Any] | EngineOptions | None = None) -> Opts:
        """These options from keyword options (the environment where they say nothing);
        raise :class:`OptionError` naming the first option that is wrong."""
        if isinstance(given, cls):
            return given
        given = dict(given or {})
        for name, why in cls.retired.items():
            if given.get(name) is not None:
                raise OptionError(cls.engine, f"{name}= is no longer an option: {why}")
        hints = typing.get_type_hints(cls)
        mine = {f.name for f in dataclasses.fields(cls)}
        kept: dict[str, Any] = {}
        for name, value in given.items():
            if name not in mine:
                if name not in known_options():
                    raise OptionError(cls.engine, _unknown(name, sorted(mine)))
                continue  # another engine's option
            if value is None:
                continue
            if not _accepts(value, hints[name]):
                raise OptionError(
                    cls.engine,
                    f"{name}= must be {_said(hints[name])}, not {type(value).__name__} {value!r}",
                )
            kept[name] = value
        return cls(**cls._from_environment(kept))

    @classmethod
    def _from_environment(cls, kept: dict[str, Any]) -> dict[str, Any]:
        """``kept`` with what the environment says of the options it does not give."""
        return kept

    @staticmethod
    def common(options: EngineOptions | Mapping[str, Any]) -> EngineOptions:
        """The options every engine takes, from an engine's options: typed, or the mapping
        of an engine without an options type (its own options set aside), checked as
        :meth:`of` checks them."""
        if isinstance(options, EngineOptions):
            return options
        names = {f.name for f in dataclasses.fields(EngineOptions)}
        return EngineOptions.of({k: v for k, v in options.items() if k in names})


@dataclasses.dataclass(frozen=True)
class SerialOptions(EngineOptions):
    """The serial engine's options (see ``restream_kit.engines.serial.replay``)."""

    engine: ClassVar[str] = "serial"

    batch_size: int = 65_536
    #: Windows run natively; False runs their expansion (the same effects, slower).
    native_windows: bool = True
    #: Publish the last epoch's outputs as final (False: a replay continued by another).
    final: bool = True


#: The Spark engine's ``path=`` values (see ``engines/spark/_engine.py``).
SPARK_PATHS = ("auto", "prefix", "passes")

#: Options of the Spark engine's retired stage path and serial fallback: refused, with why.
_SPARK_RETIRED = {
    "fold": "it chose how the retired stage path folded merges",
    "jobs": "it chose how the retired stage path grouped its Spark jobs",
    "fallback": (
        "it ran the serial engine in one Spark task, which was retired "
        "(engine='serial' replays serially)"
    ),
}
_EVERY_PASS = "; every replay takes the pass path"


@dataclasses.dataclass(frozen=True)
class SparkOptions(EngineOptions):
    """The Spark engine's options (see ``restream_kit.engines.spark``)."""

    engine: ClassVar[str] = "spark"
    retired: ClassVar[dict[str, str]] = {k: v + _EVERY_PASS for k, v in _SPARK_RETIRED.items()}

    #: ``local[N]``, ``spark://`` or ``sc://`` (None: the environment's, the profile's, local).
    master: str | None = None
    #: Spark settings for a new session (over the environment's and the profile's).
    conf: Mapping[str, Any] | None = None
    #: A SparkSession to replay on.
    session: Any = None
    #: Seconds to wait for a cluster's executors.
    executor_wait: float | None = None
    #: Tasks per pass (None: from the session's cores).
    partitions: int | None = None
    #: Which path runs the replay (``$RESTREAM_SPARK_PATH`` when not given).
    path: str = "auto"
    #: A table of about this many rows or more is written by the tasks as Parquet and read
    #: when asked (``0``: every table; None: ``$RESTREAM_RESULT_ROWS``, else 1,000,000).
    result_rows: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        problem = _path_problem(self.path)
        if problem is not None:
            raise OptionError(self.engine, problem)

    @classmethod
    def _from_environment(cls, kept: dict[str, Any]) -> dict[str, Any]:
        if "path" in kept or not os.environ.get("RESTREAM_SPARK_PATH"):
            return kept
        path = os.environ["RESTREAM_SPARK_PATH"]
        problem = _path_problem(path)
        if problem is not None:
            raise OptionError(cls.engine, f"$RESTREAM_SPARK_PATH: {problem}")
        return {**kept, "path": path}


def _path_problem(path: Any) -> str | None:
    if path in SPARK_PATHS:
        return None
    retired = " (the stage path was retired: 'passes' runs every program)"
    return f"path must be one of {', '.join(map(repr, SPARK_PATHS))}, not {path!r}" + (
        retired if path == "stages" else ""
    )


def known_options() -> frozenset[str]:
    """Every option name some engine takes (or has retired)."""
    return frozenset(
        name
        for cls in (EngineOptions, *_CLASSES)
        for name in (*(f.name for f in dataclasses.fields(cls)), *cls.retired)
    )


def _unknown(name: str, mine: list[str]) -> str:
    return f"{name}= is not an option of any engine (this one's: {', '.join(mine)})"


def _accepts(value: Any, hint: Any) -> bool:
    """Whether ``value`` fits the type ``hint`` (the few kinds options are declared with)."""
    if hint is Any:
        return True
    if typing.get_origin(hint) in (Union, types.UnionType):
        return any(_accepts(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    return isinstance(value, typing.get_origin(hint) or hint)


def _said(hint: Any) -> str:
    """A type hint in words: ``int | str | None`` -> "an int or a str"."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        words = [_said(h) for h in typing.get_args(hint) if h is not type(None)]
        return " or ".join(words)
    name = getattr(typing.get_origin(hint) or hint, "__name__", str(hint))
    return ("an " if name[0] in "aeiou" else "a ") + ("mapping" if name == "Mapping" else name)
