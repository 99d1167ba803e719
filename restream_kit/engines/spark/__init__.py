"""The Spark engine: a serial-equivalent replay over Spark's DataFrame API.

``replay(program, log, observer=None, **options)`` with options:

- ``master``: Spark master URL (default ``local[*]``; ``spark://`` and ``sc://`` for clusters);
  ``conf``: extra Spark settings for a new session; ``session``: a SparkSession to use;
- ``epoch``: events per epoch (an int) or a duration (``"1h"``), cut as every engine cuts
  (``restream_kit.epochs``): small logs run in one epoch;
- ``cancel``: a ``progress.CancelToken``; cancelling stops the replay's Spark jobs at once;
- ``partitions``: tasks per shuffled step (default: the session's cores);
- ``jobs``: ``"epoch"`` (one Spark job per epoch) or ``"step"`` (one per step, for per-step
  timings); by default ``"step"`` when epochs hold 200,000 events or more;
- ``fallback=True``: run the serial algorithm in one Spark task (also what happens, with a
  note in ``Result.warnings``, when the plan has something the parallel path does not do).

See ``_engine`` for how a replay runs and ``_layout`` for how the plan becomes steps.
"""

from __future__ import annotations

import threading
from typing import Any

from ._engine import describe_uri_log, replay
from ._session import get_session, stop_session

__all__ = ["replay", "get_session", "stop_session", "warm_up", "describe_uri_log"]


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
