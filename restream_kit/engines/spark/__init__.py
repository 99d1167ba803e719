"""The Spark engine: a serial-equivalent replay over Spark's DataFrame API.

``replay(program, log, observer=None, **options)`` with options (built and checked once as
``restream_kit.engines.options.SparkOptions``; ``replay(..., options=SparkOptions(...))``
takes them built):

- ``master``: Spark master URL (default ``local[*]``; ``spark://`` and ``sc://`` for clusters);
  ``conf``: extra Spark settings for a new session; ``session``: a SparkSession to use;
- ``epoch``: events per epoch (an int) or a duration (``"1h"``), cut as every engine cuts
  (``restream_kit.io.epochs``): small logs run in one epoch;
- ``cancel``: a ``progress.CancelToken``; cancelling stops the replay's Spark jobs at once;
- ``partitions``: tasks per pass (default: twice the session's cores; as many as its cores where
  the driver arranges the events, ``passes._local_arrangement``);
- ``path``: ``"auto"`` (default; also ``$RESTREAM_SPARK_PATH``), ``"passes"`` or
  ``"prefix"``: which of the two paths runs the replay (see ``_engine``);
- ``checkpoint``, ``resume``, ``start_from``, ``on_error``: as on the serial engine.

See ``_path`` for how a replay chooses its path, ``passes._plan`` for how the plan becomes
passes, and ``docs/spark_engine.md``.
"""

from __future__ import annotations

import threading
from typing import Any

from ._engine import describe_uri_log, replay
from ._path import forecast_layout
from .session._session import get_session, session_cores, spark_log_path, stop_session, ui_url

__all__ = [
    "replay",
    "get_session",
    "stop_session",
    "warm_up",
    "describe_uri_log",
    "forecast_layout",
    "session_cores",
    "spark_log_path",
    "ui_url",
]


def warm_up(master: str | None = None, conf: Any = None) -> None:
    """Start making the session in the background while the caller loads the log (the JVM
    takes seconds to start; so does reading a big log). The replay's own ``get_session``
    waits for it, and reports any error it met."""

    def make() -> None:
        try:
            get_session(master, conf)
        except Exception:  # noqa: BLE001 - the replay's own call raises it, clearly
            pass

    threading.Thread(target=make, name="restream-spark-warm-up", daemon=True).start()
