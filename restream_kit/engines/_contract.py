"""What an engine promises (:class:`Engine`) and what it says it can do (:class:`Capabilities`).

Code outside ``restream_kit/engines/`` never names an engine to decide what to do: it asks the
engine object (``capabilities_of(engine).history``, ``engine.warm_up(options)``). Only
``name``, ``description``, ``supports`` and ``replay`` are required, so that an engine another
package registers keeps working; every other member has a default here, read through
:func:`capabilities_of` and the functions of ``restream_kit.engines``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..model.errors import RestreamError

if TYPE_CHECKING:  # pragma: no cover
    from ..io.log import Log
    from ..io.result import Result
    from ..model.program import Program

__all__ = ["Capabilities", "Diagnostics", "Engine", "EngineUnsupported", "capabilities_of"]


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do, asked instead of its name. The defaults are what an engine that
    says nothing is taken to be: not the reference, running elsewhere, rebuilding the program
    from its source text (the assumptions that always hold), with none of the extras."""

    #: Its result defines a correct one: a replay on it is a baseline and needs no check.
    oracle: bool = False
    #: It runs the handlers in this Python process (a re-run "in the driver" is the same place).
    in_process: bool = False
    #: Its workers rebuild the program from its source text (a rewritten program needs its own).
    from_source: bool = True
    #: It splits a program into stages run in parallel (``layout`` says how, before a replay).
    parallel: bool = False
    #: It records the run's state version history (``history=True``).
    history: bool = False
    #: It reads a log given as a URI itself (``describe_log`` before the checks).
    reads_uri_logs: bool = False
    #: It is slow to start: ``warm_up(options)`` starts it while the caller loads the log.
    slow_start: bool = False
    #: A ``restream driver`` process, kept running, can replay for it (``session(options)``
    #: makes what the driver keeps up, and says its cores).
    driver_process: bool = False
    #: From this many events on, its own epochs beat the ten a notebook cell cuts a log into.
    own_epochs_from: int | None = None


@dataclass(frozen=True)
class Diagnostics:
    """Where to look while a replay runs: the engine's own log and web UI (what a notebook
    monitor shows), named as its users know them (``"Spark"``)."""

    label: str
    log_path: Path
    ui_url: str | None = None
    #: The environment setting that turns the UI on (in the kernel's, before it starts).
    ui_switch: str = ""


@runtime_checkable
class Engine(Protocol):
    """What every engine provides. Modelled on ibis' backends (``has_operation``).

    Optional members (an engine without them gets the default):

    - ``capabilities``: a :class:`Capabilities` (default ``Capabilities()``);
    - ``options_type``: the frozen dataclass of its options
      (:class:`~restream_kit.engines.options.EngineOptions`), built and checked once from the
      replay's keyword options (default: the keywords pass unchecked);
    - ``layout(program, log=None, options=None) -> dict[str, str]``: how a replay will run
      each stage, said before it starts (``restream plan --engine NAME``);
    - ``warm_up(options)``: start what is slow to start, in the background;
    - ``describe_log(log, options)``: read a log given as a URI (``reads_uri_logs``);
    - ``diagnostics() -> Diagnostics | None``: its own log and web UI;
    - ``error_line(error) -> str | None``: one line for an error its machinery raised (a
      Java exception as its root cause), None for any other error.
    """

    #: The name users pick it by (``--engine NAME``, ``replay(..., engine=NAME)``).
    name: str
    #: One line for ``--help``.
    description: str

    def supports(self, program: Program, log: Log, options: Any) -> str | None:
        """None when this engine can replay ``log`` through ``program`` with ``options`` (what
        ``restream_kit.engines.options_of`` built: its ``options_type``, or for an engine
        without one a mapping of the keyword options); otherwise one line saying why not (a
        missing dependency, an option it refuses). Cheap: called before every replay, before
        any event is read."""
        ...

    def replay(self, program: Program, log: Log, *, observer: Any = None, **options: Any) -> Result:
        """Replay ``log`` through ``program``; the result must equal the serial engine's."""
        ...


class EngineUnsupported(RestreamError):
    """An engine cannot run a replay: its :meth:`Engine.supports` gave this reason."""

    def __init__(self, engine: str, reason: str):
        self.engine = engine
        self.reason = reason
        super().__init__(f"the {engine} engine cannot run this replay: {reason}")


def capabilities_of(engine: Any) -> Capabilities:
    """What ``engine`` says it can do (the defaults for an engine that says nothing)."""
    said = getattr(engine, "capabilities", None)
    return said if isinstance(said, Capabilities) else Capabilities()
