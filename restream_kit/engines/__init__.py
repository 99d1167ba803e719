"""Engines replay a compiled program over a log. ``serial`` is the reference; ``spark`` is parallel.

Every engine honours one contract, :class:`Engine`: a ``name``, ``supports(program, log,
options)`` that returns ``None`` when the engine can run that replay or one line saying why it
cannot, and ``replay(program, log, observer=..., **options)``. Engines are found through the
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

import functools
from importlib import metadata
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..model.errors import RestreamError

if TYPE_CHECKING:  # pragma: no cover
    from ..io.log import Log
    from ..io.result import Result
    from ..model.program import Program

__all__ = [
    "ENGINES",
    "Engine",
    "EngineUnsupported",
    "ENTRY_POINT_GROUP",
    "engine_names",
    "engines",
    "get_engine",
    "ORACLE",
    "is_oracle",
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


@runtime_checkable
class Engine(Protocol):
    """What every engine provides. Modelled on ibis' backends (``has_operation``)."""

    #: The name users pick it by (``--engine NAME``, ``replay(..., engine=NAME)``).
    name: str
    #: One line for ``--help``.
    description: str

    def supports(self, program: Program, log: Log, options: dict[str, Any]) -> str | None:
        """None when this engine can replay ``log`` through ``program`` with ``options``;
        otherwise one line saying why not (a missing dependency, an option it refuses).
        Cheap: called before every replay, before any event is read."""
        ...

    def replay(self, program: Program, log: Log, *, observer: Any = None, **options: Any) -> Result:
        """Replay ``log`` through ``program``; the result must equal the serial engine's."""
        ...

    # Optional: ``layout(program, log=None, options=None) -> dict[str, str]``, how a replay
    # will run each stage, said before it starts (``restream plan --engine NAME``).


class EngineUnsupported(RestreamError):
    """An engine cannot run a replay: its :meth:`Engine.supports` gave this reason."""

    def __init__(self, engine: str, reason: str):
        self.engine = engine
        self.reason = reason
        super().__init__(f"the {engine} engine cannot run this replay: {reason}")


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


def __getattr__(name: str) -> Any:
    # ENGINES is computed on first use: reading entry points costs a scan of site-packages.
    if name == "ENGINES":
        return engine_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
