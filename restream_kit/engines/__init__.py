"""Engines replay a compiled program over a log. ``serial`` is the reference; ``spark`` is parallel.

Every engine honours one contract, :class:`Engine` (``_contract``): a ``name``,
``supports(program, log, options)`` that returns ``None`` when the engine can run that replay
or one line saying why it cannot, and ``replay(program, log, observer=..., **options)``. It
says what it can do in its :class:`Capabilities` (the oracle, a history, a slow start, a log
given as a URI...), and takes its options as one frozen dataclass (``options``:
:class:`SerialOptions`, :class:`SparkOptions`) built and checked once by :func:`options_of`:
code outside this package asks these, and never compares an engine's name
(``tests/project/test_engine_names.py``). Engines are found through the
``restream_kit.engines`` entry point group (``pyproject.toml``), so another package can add
one; the command line's and the magics' ``--engine`` choices and the test suite's engine
matrix all come from :func:`engine_names`. The built-in engines are always there, even when
the package's metadata is missing (a source checkout on ``PYTHONPATH``), and cannot be
replaced by another package's entry point of the same name.

May import: everything below them in ``restream_kit`` (``model``, ``compiler``, ``runtime``,
``io``, ``planner``, ``history``). Never ``api``, ``iterate``, ``workbench``, ``cli`` nor the
notebook layer (``widgets``, ipywidgets, plotly); only ``engines/spark/`` imports ``pyspark``.
``tests/test_layers.py`` checks this.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Any

from ..model.errors import RestreamError
from ._contract import Capabilities, Diagnostics, Engine, EngineUnsupported, capabilities_of
from .options import EngineOptions, OptionError, SerialOptions, SparkOptions

if TYPE_CHECKING:  # pragma: no cover
    from ..io.log import Log
    from ..io.result import Result
    from ..model.program import Program

__all__ = [
    "ENGINES",
    "Capabilities",
    "Diagnostics",
    "Engine",
    "EngineOptions",
    "EngineUnsupported",
    "ENTRY_POINT_GROUP",
    "OptionError",
    "SerialOptions",
    "SparkOptions",
    "capabilities_of",
    "diagnostics",
    "engine_names",
    "engines",
    "error_line",
    "get_engine",
    "options_of",
    "ORACLE",
    "is_oracle",
    "replay_on",
    "with_options",
]

#: The entry point group engines are registered under (``[project.entry-points."..."]``).
ENTRY_POINT_GROUP = "restream_kit.engines"

#: The engine every other one must equal: its replay of a program is that program's baseline.
ORACLE = "serial"


def is_oracle(name: str) -> bool:
    """True for the engine that defines a correct result (a replay on it needs no check)."""
    return name == ORACLE


#: The engines of this package, by name -> ``module:Class``; what the registry falls back on.
BUILTIN = {
    "serial": "restream_kit.engines._builtin:SerialEngine",
    "spark": "restream_kit.engines._builtin:SparkEngine",
}


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(__import__(module, fromlist=[attr]), attr)


def _instance(obj: Any, name: str) -> Engine:
    engine = obj() if isinstance(obj, type) else obj
    if not isinstance(engine, Engine):
        raise TypeError(f"entry point {name!r} of {ENTRY_POINT_GROUP} is not an Engine: {obj!r}")
    if engine.name != name:
        raise TypeError(f"entry point {name!r} of {ENTRY_POINT_GROUP} names engine {engine.name!r}")
    return engine


def _entry_points() -> dict[str, Any]:
    try:
        return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    except Exception:  # noqa: BLE001 - broken metadata: the built-ins still work
        return {}


@functools.cache
def _builtin_engine(name: str) -> Engine:
    return _instance(_load(BUILTIN[name]), name)


@functools.cache
def engines() -> dict[str, Engine]:
    """Every registered engine by name: ``serial`` first (the oracle), ``spark``, then the
    engines other packages register, by name.

    The built-in engines are registered under their names in this package's entry points;
    they are loaded from :data:`BUILTIN` all the same, so that they are there when the
    metadata is missing and no other package can replace the oracle. Loading an engine
    imports only its small wrapper class, never Spark."""
    found = {name: _builtin_engine(name) for name in BUILTIN}
    for name, point in sorted(_entry_points().items()):
        if name not in found:
            found[name] = _instance(point.load(), name)
    return found


def engine_names() -> tuple[str, ...]:
    """The names of every registered engine, ``serial`` first."""
    return tuple(engines())


def get_engine(name: str) -> Engine:
    """The engine called ``name``; raise :class:`RestreamError` naming the choices otherwise."""
    if name in BUILTIN:  # no scan of the installed packages' metadata for these
        return _builtin_engine(name)
    try:
        return engines()[name]
    except KeyError:
        raise RestreamError(
            f"unknown engine {name!r}; choose one of {', '.join(engine_names())}"
        ) from None


def options_of(engine: Engine, given: Mapping[str, Any]) -> EngineOptions | dict[str, Any]:
    """``engine``'s options built and checked once from the keyword options ``given`` (its
    ``options_type``); for an engine without one, the keywords as given, once the options
    every engine takes are checked (:meth:`EngineOptions.common`)."""
    kind = getattr(engine, "options_type", None)
    if kind is not None:
        return kind.of(given)
    try:
        EngineOptions.common(given)
    except OptionError as wrong:
        raise OptionError(engine.name, wrong.reason) from None
    return dict(given)


def with_options(options: EngineOptions | Mapping[str, Any], **changes: Any) -> Any:
    """``options`` (from :func:`options_of`) with ``changes``."""
    if isinstance(options, EngineOptions):
        return dataclasses.replace(options, **changes)
    return {**options, **changes}


def replay_on(
    engine: Engine,
    program: Program,
    log: Log,
    options: EngineOptions | Mapping[str, Any],
    observer: Any = None,
) -> Result:
    """``engine``'s replay with ``options`` (from :func:`options_of`)."""
    if isinstance(options, EngineOptions):
        return engine.replay(program, log, observer=observer, options=options)
    return engine.replay(program, log, observer=observer, **options)


def diagnostics(name: str) -> Diagnostics | None:
    """Where to look while a replay on engine ``name`` runs (its own log and web UI), or None."""
    engine = get_engine(name)
    said = getattr(engine, "diagnostics", None)
    return said() if callable(said) else None


def error_line(error: BaseException) -> str | None:
    """One line for an error an engine's machinery raised (a Java exception as its root
    cause), asked of every engine; None for any other error."""
    for engine in engines().values():
        said = getattr(engine, "error_line", None)
        line = said(error) if callable(said) else None
        if line:
            return line
    return None


def __getattr__(name: str) -> Any:
    # ENGINES is computed on first use: reading entry points costs a scan of site-packages.
    if name == "ENGINES":
        return engine_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
