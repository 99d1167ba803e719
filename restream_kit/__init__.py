"""restream_kit: backtest stream-processing rules, serially or on Spark, with identical results.

A program is plain Python: ``state`` declarations, ``@on`` handlers, ``emit`` and ``schedule``.
``replay(program, log, engine=...)`` runs it; ``plan(program)`` tells how parallel it can be.

The layers, lowest first; each may import only the ones before it (``tests/test_layers.py``
holds the rules as a table and checks every module's imports):

1. the program model, the compiler passes and the I/O modules (``state``, ``program``,
   ``windows``, ``_compile``..., ``log``, ``result``, ``checkpoint``, ``catalog``...);
2. the planner (``restream_kit.planner``);
3. the engines (``restream_kit.engines``: ``serial``, and ``spark``, the only importer of
   ``pyspark``);
4. the API and the command line (``api``, ``cli``, ``compare``, ``workbench``);
5. the notebook layer, the top-level ``widgets`` package (ipywidgets, plotly), imported only
   by the magics when a cell runs (``%load_ext restream_kit`` calls
   :func:`load_ipython_extension`).

May import: numpy, pyarrow, polars, duckdb, networkx, rich. Never ``widgets``, ipywidgets,
plotly or (outside ``engines/spark/``) ``pyspark``: ``import restream_kit`` works without them.
"""

from __future__ import annotations

from . import state
from .api import RestreamWarning, replay
from .durations import days, hours, milliseconds, minutes, seconds
from .errors import CheckError, HandlerError, LogError, OutputError, ProgramError, RestreamError
from .log import Log
from .params import param
from .program import Program, emit, on, schedule
from .result import Metrics, Result
from .samples import sample_data, sample_program

__all__ = [
    "state",
    "on",
    "emit",
    "schedule",
    "param",
    "sweep",
    "explain",
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


def __getattr__(name: str):
    # plan and diff pull in networkx, duckdb and polars: import them on first use only.
    if name == "plan":
        from .planner import plan

        return plan
    if name == "diff":
        from .compare import diff

        return diff
    if name == "sweep":
        from .sweeps import sweep

        return sweep
    if name == "explain":
        from .explanation import explain

        return explain
    if name == "check_against_log":
        from .checks import check_against_log

        return check_against_log
    raise AttributeError(f"module 'restream_kit' has no attribute {name!r}")


def load_ipython_extension(ipython) -> None:  # pragma: no cover - exercised by notebook tests
    """``%load_ext restream_kit``: register the ``%%restream`` magics (imported lazily)."""
    from .magics import register

    register(ipython)
