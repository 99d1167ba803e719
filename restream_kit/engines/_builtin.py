"""The two engines of this package as :class:`~restream_kit.engines.Engine` objects.

Thin wrappers: the replays themselves are ``engines.serial.replay`` and
``engines.spark.replay``. Importing this module imports neither Spark nor the serial engine.
"""

from __future__ import annotations

import importlib.util
from typing import Any

__all__ = ["SerialEngine", "SparkEngine"]


class SerialEngine:
    """One event at a time, in this process: the definition of a correct result."""

    name = "serial"
    description = "the reference: one event at a time, in this process"

    def supports(self, program: Any, log: Any, options: dict[str, Any]) -> str | None:
        return None  # the serial engine runs every program the model can express

    def replay(self, program: Any, log: Any, *, observer: Any = None, **options: Any) -> Any:
        from . import serial

        return serial.replay(program, log, observer=observer, **options)


#: The Spark engine's ``path=`` values (see ``engines/spark/_engine.py``).
SPARK_PATHS = ("auto", "prefix", "passes", "stages")


class SparkEngine:
    """The same result, computed by PySpark in parallel (local, standalone or Spark Connect)."""

    name = "spark"
    description = "parallel on PySpark, serial-equivalent (local[*], spark:// or sc://)"

    def supports(self, program: Any, log: Any, options: dict[str, Any]) -> str | None:
        if options.get("session") is None and importlib.util.find_spec("pyspark") is None:
            return "PySpark is not installed (pip install 'restream_kit[spark]')"
        path = options.get("path")
        if path is not None and path not in SPARK_PATHS:
            return f"path must be one of {', '.join(map(repr, SPARK_PATHS))}, not {path!r}"
        return None

    def replay(self, program: Any, log: Any, *, observer: Any = None, **options: Any) -> Any:
        from . import spark

        return spark.replay(program, log, observer=observer, **options)
