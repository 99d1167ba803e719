"""The two engines of this package as :class:`~restream_kit.engines.Engine` objects.

Thin wrappers: the replays themselves are ``engines.serial.replay`` and
``engines.spark.replay``. Importing this module imports neither Spark nor the serial engine.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from ._contract import Capabilities, Diagnostics
from .options import SPARK_PATHS, SerialOptions, SparkOptions, known_options, spark_option_problem

__all__ = ["SerialEngine", "SparkEngine", "SPARK_PATHS", "spark_option_problem"]


class SerialEngine:
    """One event at a time, in this process: the definition of a correct result."""

    name = "serial"
    description = "the reference: one event at a time, in this process"
    capabilities = Capabilities(oracle=True, in_process=True, from_source=False, history=True)
    options_type = SerialOptions

    def supports(self, program: Any, log: Any, options: dict[str, Any]) -> str | None:
        return None  # the serial engine runs every program the model can express

    def layout(self, program: Any, log: Any = None, options: Any = None) -> dict[str, str]:
        """How a replay will run, said before it starts (see :meth:`SparkEngine.layout`)."""
        return {"whole program": "one event at a time, in this process"}

    def replay(
        self,
        program: Any,
        log: Any,
        *,
        observer: Any = None,
        options: SerialOptions | None = None,
        **given: Any,
    ) -> Any:
        """Replay with ``options`` (built by the caller), else with those built from ``given``."""
        from . import serial

        opts = options if options is not None else SerialOptions.of(given)
        return serial.replay(program, log, observer=observer, **opts.keywords())


class SparkEngine:
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

    def supports(self, program: Any, log: Any, options: Any) -> str | None:
        if options.get("session") is None and importlib.util.find_spec("pyspark") is None:
            return "PySpark is not installed (pip install 'restream_kit[spark]')"
        return spark_option_problem(options)

    def layout(self, program: Any, log: Any = None, options: Any = None) -> dict[str, str]:
        """How a replay will run each stage, said before it starts, by stage: lowered to
        columns over N epochs (the prefix path, judged when ``log`` is given), parallel over
        partitions by a key, or sequential in one task with the reason (what
        ``metrics.path`` then says, but for the task counts)."""
        from .spark._engine import option_blockers
        from .spark.passes._plan import layout

        opts = _forecast_options(options)
        lines = layout(program, opts.partitions)
        # As the engine chooses (``_Replay._lowered``), which judges by its session where
        # this judges by the master's URL: Spark Connect and logs given as a URI take the
        # passes (but a URI log Spark has copied on a local master); local masters and
        # spark:// clusters the prefix path.
        master = str(opts.master or "local")
        blocked = (
            bool(option_blockers(opts, opts.on_error))
            or master.startswith("sc://")
            or (
                getattr(log, "uri", None) is not None
                and not (getattr(log, "copied", False) and master.startswith("local"))
            )
        )
        if not blocked and log is not None and opts.path != "passes" and len(log):
            from ..io.epochs import cut
            from .spark.prefix._driver import default_epoch, lowered_over, prefix_plan
            from .spark.session._session import planned_cores

            low, _why = prefix_plan(program, log)
            if low is not None:
                epoch = opts.epoch
                if epoch is None and not opts.checkpoint:
                    epoch = default_epoch(len(log), planned_cores(opts.master))
                epochs = sum(1 for ep in cut(log, epoch) if len(ep))
                said = lowered_over(epochs, bool(opts.checkpoint))
                return {stage: said for stage in lines}
        return lines

    def replay(
        self,
        program: Any,
        log: Any,
        *,
        observer: Any = None,
        options: SparkOptions | None = None,
        **given: Any,
    ) -> Any:
        """Replay with ``options`` (built by the caller), else with those built from ``given``."""
        from . import spark

        return spark.replay(program, log, observer=observer, options=options, **given)

    def warm_up(self, options: SparkOptions) -> None:
        """Start the session in the background (the JVM takes seconds) unless one is given."""
        if options.session is None:
            from .spark import warm_up

            warm_up(options.master, options.conf)

    def describe_log(self, log: Any, options: SparkOptions) -> None:
        """Read a log given as a URI with Spark's reader, so that the checks before the
        replay see its columns and kinds (the session is the replay's)."""
        from .spark import describe_uri_log, get_session

        session = options.session or get_session(
            options.master, options.conf, None, options.executor_wait
        )
        describe_uri_log(session, log, options)

    def session(self, options: SparkOptions) -> Any:
        """The SparkSession a replay with ``options`` runs on, made now (what a ``restream
        driver`` keeps up), and its cores."""
        from .spark.session._session import get_session, session_cores

        session = get_session(options.master, options.conf, options.session, options.executor_wait)
        return session, session_cores(session)

    def diagnostics(self) -> Diagnostics:
        """Spark's own log, and its web UI once the session has one."""
        from .spark.session._session import spark_log_path, ui_url

        return Diagnostics(
            "Spark",
            spark_log_path().resolve(),
            ui_url(),
            "RESTREAM_SPARK_UI=1",
        )

    def error_line(self, error: BaseException) -> str | None:
        """A Java exception as its root cause's line and where Spark's log is; else None."""
        if not type(error).__module__.startswith(("py4j", "pyspark")):
            return None
        from .spark.session._session import spark_log_path

        name, text = type(error).__name__, str(error)
        causes = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("Caused by:")]
        first = causes[-1].removeprefix("Caused by:").strip() if causes else ""
        first = first or next((ln.strip() for ln in text.splitlines() if ln.strip()), name)
        return f"{name}: {first} (Spark's log: {spark_log_path()})"


def _forecast_options(options: Any) -> SparkOptions:
    """Spark options for a forecast: built from what is given, setting aside what is not an
    engine option (a cell's ``baseline``, ``by``)."""
    if isinstance(options, SparkOptions):
        return options
    known = known_options()
    return SparkOptions.of({k: v for k, v in (options or {}).items() if k in known})
