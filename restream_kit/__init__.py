"""restream_kit: backtest stream-processing rules, serially or on Spark, with identical results.

A program is plain Python: ``state`` declarations, ``@on`` handlers, ``emit`` and ``schedule``.
``replay(program, log, engine=...)`` runs it; ``plan(program)`` tells how parallel it can be.

The layers, lowest first; each package may import only the ones before it
(``tests/test_layers.py`` holds the rules as a table and checks every module's imports; each
package's docstring says the same):

1. ``model``: what users write (``state``, ``program``, ``windows``, durations, ``params``,
   ``values``, ``errors``);
2. ``compiler``: scopes, window expansion, the rewrite to dicts, inlining, lowering;
3. ``runtime``: the one runtime of the serial semantics (timed writes, scheduled events);
4. ``io``: logs, epochs, results, progress, checkpoints, the catalog, diffs;
5. ``planner``: checks against a log and the plan (the frozen IR every engine and view reads);
6. ``history``: what each stage read, recorded by the serial engine for reuse;
7. ``engines``: ``serial`` and ``spark`` (the only importer of ``pyspark``);
8. the API: ``api`` (``replay``), ``iterate`` (sweeps, reuse, explain), ``workbench``;
9. ``cli``: the ``restream`` command line;
10. the notebook layer, the top-level ``widgets`` package (ipywidgets, plotly, the magics),
    imported only by :func:`load_ipython_extension` when ``%load_ext restream_kit`` runs.

May import: numpy, pyarrow, polars, duckdb, networkx, rich. Never ``widgets``, ipywidgets,
plotly or (outside ``engines/spark/``) ``pyspark``: ``import restream_kit`` works without them.
"""

from __future__ import annotations

import importlib

from .api import RestreamWarning, replay
from .io.log import Log
from .io.result import Metrics, Result
from .io.samples import sample_data, sample_program
from .model import state
from .model.durations import days, hours, milliseconds, minutes, seconds
from .model.errors import (
    CheckError,
    HandlerError,
    LogError,
    OutputError,
    ProgramError,
    RestreamError,
)
from .model.params import param
from .model.program import Program, emit, on, schedule

__all__ = [
    "state",
    "on",
    "emit",
    "schedule",
    "param",
    "sweep",
    "explain",
    "score",
    "milliseconds",
    "seconds",
    "minutes",
    "hours",
    "days",
    "Program",
    "Log",
    "replay",
    "plan",
    "diff",
    "Result",
    "Metrics",
    "sample_data",
    "sample_program",
    "check_against_log",
    "RestreamError",
    "ProgramError",
    "CheckError",
    "LogError",
    "HandlerError",
    "OutputError",
    "RestreamWarning",
    "load_ipython_extension",
]

__version__ = "0.1.0"


#: Names imported on first use only (they pull in networkx, duckdb and polars): name -> module.
_LAZY = {
    "plan": "restream_kit.planner",
    "diff": "restream_kit.io.compare",
    "sweep": "restream_kit.iterate.sweeps",
    "explain": "restream_kit.iterate.explain",
    "score": "restream_kit.iterate.score",
    "check_against_log": "restream_kit.planner.checks",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'restream_kit' has no attribute {name!r}")


def load_ipython_extension(ipython) -> None:  # pragma: no cover - exercised by notebook tests
    """``%load_ext restream_kit``: register the ``%%restream`` magics (imported lazily)."""
    from widgets.magics import register

    register(ipython)
