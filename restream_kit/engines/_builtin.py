"""The two engines of this package as :class:`~restream_kit.engines.Engine` objects.

Thin wrappers: the replays themselves are ``engines.serial.replay`` and
``engines.spark.replay``. Importing this module imports neither Spark nor the serial engine.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from typing import Any

from ._contract import Capabilities, Diagnostics
from .options import (
    SPARK_PATHS,
    EngineOptions,
    OptionError,
    SerialOptions,
    SparkOptions,
    known_options,
)

__all__ = ["SerialEngine", "SparkEngine", "SPARK_PATHS"]

#: The environment setting that turns Spark's web UI on (in the kernel's, before it starts).
_UI = "RESTREAM_SPARK_UI=1"


class _Builtin(ABC):
    """What both engines do alike: a replay's options are built once, here."""

    options_type: type[EngineOptions]

    def replay(
        self,
        program: Any,
        log: Any,
        *,
        observer: Any = None,
        options: EngineOptions | None = None,
        **given: Any,
    ) -> Any:
        """Replay with ``options`` (built by the caller), else with those built from ``given``."""
        opts = options if options is not None else self.options_type.of(given)
        return self._replay(program, log, observer, opts)

    @abstractmethod
    def _replay(self, program: Any, log: Any, observer: Any, options: Any) -> Any:
        """Replay with ``options``, built."""


class SerialEngine(_Builtin):
    """One event at a time, in this process: the definition of a correct result."""

    name = "serial"
    description = "the reference: one event at a time, in this process"
    capabilities = Capabilities(oracle=True, in_process=True, from_source=False, history=True)
    options_type = SerialOptions

    def supports(self, program: Any, log: Any, options: SerialOptions) -> str | None:
        return None  # the serial engine runs every program the model can express

    def layout(self, program: Any, log: Any = None, options: Any = None) -> dict[str, str]:
        """How a replay will run, said before it starts (see :meth:`SparkEngine.layout`)."""
        return {"whole program": "one event at a time, in this process"}

    def _replay(self, program: Any, log: Any, observer: Any, options: SerialOptions) -> Any:
        from . import serial

        return serial.replay(program, log, observer=observer, options=options)


class SparkEngine(_Builtin):
    """The same result, computed by PySpark in parallel (local, standalone or Spark Connect)."""

    name = "spark"
    description = "parallel on PySpark, serial-equivalent (local[*], spark:// or sc://)"
    capabilities = Capabilities(
        parallel=True,
        history=True,
        reads_uri_logs=True,
        slow_start=True,
        driver_process=True,
        # Its prefix path runs one task per epoch: on a large log, ten tasks a round cost
        # about twice the few it cuts the log into (see ``restream_kit.workbench.log_epoch``).
        own_epochs_from=1_000_000,
    )
    options_type = SparkOptions

    def supports(self, program: Any, log: Any, options: SparkOptions) -> str | None:
        """None, or why not: PySpark missing (unless a session is given); options given as
        keywords (a mapping) are built first, and an option it refuses is the reason."""
        try:
            opts = SparkOptions.of(options)
        except OptionError as refused:
            return refused.reason
        if opts.session is None and importlib.util.find_spec("pyspark") is None:
            return "PySpark is not installed (pip install 'restream_kit[spark]')"
        return None

    def layout(self, program: Any, log: Any = None, options: Any = None) -> dict[str, str]:
        """How a replay will run each stage, said before it starts, by stage: lowered to
        columns over N epochs (the prefix path, judged when ``log`` is given), parallel over
        partitions by a key, or sequential in one task with the reason (what
        ``metrics.path`` then says, but for the task counts)."""
        return _spark().forecast_layout(program, log, _forecast_options(options))

    def _replay(self, program: Any, log: Any, observer: Any, options: SparkOptions) -> Any:
        return _spark().replay(program, log, observer=observer, options=options)

    def warm_up(self, options: SparkOptions) -> None:
        """Start the session in the background (the JVM takes seconds) unless one is given."""
        if options.session is None:
            _spark().warm_up(options.master, options.conf)

    def describe_log(self, log: Any, options: SparkOptions) -> None:
        """Read a log given as a URI with Spark's reader, so that the checks before the
        replay see its columns and kinds (the session is the replay's)."""
        spark = _spark()
        session = options.session or spark.get_session(
            options.master, options.conf, None, options.executor_wait
        )
        spark.describe_uri_log(session, log, options)

    def session(self, options: SparkOptions) -> Any:
        """The SparkSession a replay with ``options`` runs on, made now (what a ``restream
        driver`` keeps up), and its cores."""
        spark = _spark()
        session = spark.get_session(
            options.master, options.conf, options.session, options.executor_wait
        )
        return session, spark.session_cores(session)

    def diagnostics(self) -> Diagnostics:
        """Spark's own log, and its web UI once the session has one."""
        spark = _spark()
        return Diagnostics("Spark", spark.spark_log_path().resolve(), spark.ui_url(), _UI)

    def error_line(self, error: BaseException) -> str | None:
        """A Java exception as its root cause's line and where Spark's log is; else None."""
        if not type(error).__module__.startswith(("py4j", "pyspark")):
            return None
        name, text = type(error).__name__, str(error)
        if name == "Py4JNetworkError":  # the JVM stopped answering: its heap, most often
            return (
                f"Spark's JVM stopped answering ({text.splitlines()[0] if text else name}); "
                f"if Spark's log says OutOfMemoryError, give it more memory with "
                f"RESTREAM_SPARK_DRIVER_MEMORY (Spark's log: {_spark().spark_log_path()})"
            )
        causes = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("Caused by:")]
        first = causes[-1].removeprefix("Caused by:").strip() if causes else ""
        first = first or next((ln.strip() for ln in text.splitlines() if ln.strip()), name)
        return f"{name}: {first} (Spark's log: {_spark().spark_log_path()})"


def _spark() -> Any:
    """The Spark engine's package, imported on its first use: it takes about a second, and
    ``import restream_kit`` or a serial replay never needs it."""
    from . import spark

    return spark


def _forecast_options(options: Any) -> SparkOptions:
    """Spark options for a forecast: built from what is given, setting aside what is not an
    engine option (a cell's ``baseline``, ``by``)."""
    if isinstance(options, SparkOptions):
        return options
    known = known_options()
    return SparkOptions.of({k: v for k, v in (options or {}).items() if k in known})
