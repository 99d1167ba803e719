"""Which of the Spark engine's two paths runs a replay: the one rule, :func:`prefix_choice`.

A replay asks it knowing its session (``_engine._Replay._lowered``); so do the log read of a
local master's start (``_engine._read_meanwhile``) and, before any replay, the engine's
layout (:func:`forecast_layout`, ``restream plan --engine spark``), knowing the master's URL.
"""

from __future__ import annotations

from ...compiler.lower import Lowered
from ...io.epochs import cut
from ...io.log import Log
from ...model.program import Program
from ..options import SparkOptions
from .passes._plan import layout
from .prefix._driver import default_epoch, lowered_over, prefix_plan
from .session._session import planned_cores

__all__ = ["forecast_layout", "lowers", "option_blockers", "prefix_choice"]

#: What the prefix path does not do: start a changed program from a committed state. It
#: commits checkpoints, and resumes its own program's (see ``_engine._Replay._lowered``).
_STARTING = ("start_from",)


def option_blockers(options: SparkOptions, on_error: str) -> list[str]:
    """The options of a replay that keep it off the prefix path."""
    blockers = [name for name in _STARTING if getattr(options, name)]
    if on_error != "stop":
        blockers.append("on_error")
    return blockers


def prefix_choice(
    program: Program,
    log: Log,
    options: SparkOptions,
    *,
    connect: bool = False,
    uri_far: bool = False,
) -> tuple[Lowered | None, str | None]:
    """The one rule of which path runs a replay: (the lowered program, None) when the prefix
    path may run it, else (None, why not).

    ``path="passes"``, ``start_from``, ``on_error`` other than stop, an empty log, a log
    given as a URI that Spark has not copied to this machine (``uri_far``: Spark's reader
    reads it on the cluster) and a Spark Connect session (``connect``: no broadcast) keep a
    replay off it, and so does a program that does not lower. A replay knows ``connect``
    and ``uri_far`` from its session (``_Replay._lowered``, which also judges a resume by
    its checkpoint); a forecast before the replay, from the master's URL
    (:func:`forecast_layout`)."""
    if options.path == "passes":
        return None, "path='passes'"
    blockers = option_blockers(options, options.on_error)
    # (An undescribed URI log is not counted: that would read it in this process.)
    if (not uri_far or log.summary is not None) and not len(log):
        blockers.append("an empty log")
    if uri_far:
        blockers.append("a log given as a URI on a cluster (Spark reads it)")
    if connect:
        blockers.append("Spark Connect")
    if blockers:
        return None, f"not with {', '.join(blockers)}"
    return prefix_plan(program, log)


def forecast_layout(program: Program, log: Log | None, options: SparkOptions) -> dict[str, str]:
    """How a replay with ``options`` will run each stage, said before it starts: lowered to
    columns over N epochs (the prefix path, judged by :func:`prefix_choice` when ``log`` is
    given, with the master's URL standing for the session), else the passes' layout."""
    lines = layout(program, options.partitions)
    if log is None:
        return lines
    master = str(options.master or "local")
    copied = bool(getattr(log, "copied", False)) and master.startswith("local")
    uri_far = getattr(log, "uri", None) is not None and not copied
    low, _why = prefix_choice(
        program, log, options, connect=master.startswith("sc://"), uri_far=uri_far
    )
    if low is None:
        return lines
    epoch = options.epoch
    if epoch is None and not options.checkpoint:
        epoch = default_epoch(len(log), planned_cores(options.master))
    epochs = sum(1 for ep in cut(log, epoch) if len(ep))
    said = lowered_over(epochs, bool(options.checkpoint))
    return {stage: said for stage in lines}


def lowers(program: Program, log: Log, options: SparkOptions) -> bool:
    """Whether the prefix path may run the replay, judged from the log's ordered copy alone
    (the session's own blockers are judged later, by ``_Replay._lowered``)."""
    try:
        return prefix_choice(program, log, options)[0] is not None
    except Exception:  # noqa: BLE001 - the replay reports a bad log itself
        return False
