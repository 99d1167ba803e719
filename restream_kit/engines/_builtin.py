"""The two engines of this package as :class:`~restream_kit.engines.Engine` objects.

Thin wrappers: the replays themselves are ``engines.serial.replay`` and
``engines.spark.replay``. Importing this module imports neither Spark nor the serial engine.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

__all__ = ["SerialEngine", "SparkEngine", "SPARK_PATHS", "spark_option_problem"]


class SerialEngine:
    """One event at a time, in this process: the definition of a correct result."""

    name = "serial"
    description = "the reference: one event at a time, in this process"

    def supports(self, program: Any, log: Any, options: dict[str, Any]) -> str | None:
        return None  # the serial engine runs every program the model can express

    def layout(self, program: Any, log: Any = None, options: Any = None) -> dict[str, str]:
        """How a replay will run, said before it starts (see :meth:`SparkEngine.layout`)."""
        return {"whole program": "one event at a time, in this process"}

    def replay(self, program: Any, log: Any, *, observer: Any = None, **options: Any) -> Any:
        from . import serial

        return serial.replay(program, log, observer=observer, **options)


#: The Spark engine's ``path=`` values (see ``engines/spark/_engine.py``).
SPARK_PATHS = ("auto", "prefix", "passes")

#: Options of the Spark engine's retired stage path and serial fallback: refused, with why.
_RETIRED_OPTIONS = {
    "fold": "it chose how the retired stage path folded merges",
    "jobs": "it chose how the retired stage path grouped its Spark jobs",
    "fallback": (
        "it ran the serial engine in one Spark task, which was retired "
        "(engine='serial' replays serially)"
    ),
}


def spark_option_problem(options: dict[str, Any]) -> str | None:
    """Why the Spark engine refuses ``options`` (a ``path`` it does not have, an option it no
    longer has), or None."""
    for name, why in _RETIRED_OPTIONS.items():
        if options.get(name) is not None:
            return f"{name}= is no longer an option: {why}; every replay takes the pass path"
    path = options.get("path")
    if path is not None and path not in SPARK_PATHS:
        retired = " (the stage path was retired: 'passes' runs every program)"
        return f"path must be one of {', '.join(map(repr, SPARK_PATHS))}, not {path!r}" + (
            retired if path == "stages" else ""
        )
    return None


class SparkEngine:
    """The same result, computed by PySpark in parallel (local, standalone or Spark Connect)."""

    name = "spark"
    description = "parallel on PySpark, serial-equivalent (local[*], spark:// or sc://)"

    def supports(self, program: Any, log: Any, options: dict[str, Any]) -> str | None:
        if options.get("session") is None and importlib.util.find_spec("pyspark") is None:
            return "PySpark is not installed (pip install 'restream_kit[spark]')"
        return spark_option_problem(options)

    def layout(self, program: Any, log: Any = None, options: Any = None) -> dict[str, str]:
        """How a replay will run each stage, said before it starts, by stage: lowered to
        columns over N epochs (the prefix path, judged when ``log`` is given), parallel over
        partitions by a key, or sequential in one task with the reason (what
        ``metrics.path`` then says, but for the task counts)."""
        from .spark._engine import option_blockers
        from .spark._passes import layout

        options = dict(options or {})
        lines = layout(program, options.get("partitions"))
        # As the engine chooses (``_Replay._lowered``), which judges by its session where
        # this judges by the master's URL: Spark Connect and logs given as a URI take the
        # passes (but a URI log Spark has copied on a local master); local masters and
        # spark:// clusters the prefix path.
        master = str(options.get("master") or "local")
        blocked = (
            bool(option_blockers(options, options.get("on_error", "stop")))
            or master.startswith("sc://")
            or (
                getattr(log, "uri", None) is not None
                and not (log.copied and master.startswith("local"))
            )
        )
        path = options.get("path") or os.environ.get("RESTREAM_SPARK_PATH", "auto")
        if not blocked and log is not None and path != "passes" and len(log):
            from ..io.epochs import cut
            from .spark._prefix import default_epoch, lowered_over, prefix_plan
            from .spark._session import planned_cores

            low, _why = prefix_plan(program, log)
            if low is not None:
                epoch = options.get("epoch")
                if epoch is None and not options.get("checkpoint"):
                    epoch = default_epoch(len(log), planned_cores(options.get("master")))
                epochs = sum(1 for ep in cut(log, epoch) if len(ep))
                said = lowered_over(epochs, bool(options.get("checkpoint")))
                return {stage: said for stage in lines}
        return lines

    def replay(self, program: Any, log: Any, *, observer: Any = None, **options: Any) -> Any:
        from . import spark

        return spark.replay(program, log, observer=observer, **options)
