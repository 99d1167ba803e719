"""Progress and cancellation while a Spark job runs, from Spark's status tracker.

Shared by the pass path (``passes._driver``: one job per pass) and the prefix path
(``prefix._jobs``). Spark Connect has no status tracker: there the watch reports nothing and
progress comes per pass.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["JobWatch"]


class JobWatch:
    """Reports progress from Spark's status tracker while a pass's job runs, and cancels the
    job when ``cancelled()`` says so: a cancel that came after the last check but before the
    job started found no job to cancel."""

    def __init__(
        self, session: Any, group: str, on_tasks: Any, every_s: float = 0.25, cancelled=None
    ):
        self.every_s, self.session, self.cancelled = every_s, session, cancelled
        self.before: set[int] = set()
        try:
            self.tracker = session.sparkContext.statusTracker()
        except Exception:  # noqa: BLE001 - Spark Connect has none: progress per pass only
            self.tracker = None
        self.group = group
        self.on_tasks = on_tasks
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> JobWatch:
        if self.tracker is not None:
            try:  # earlier passes' jobs share the group: count this pass's only
                self.before = set(self.tracker.getJobIdsForGroup(self.group))
            except Exception:  # noqa: BLE001
                self.before = set()
            self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=2)

    def _loop(self) -> None:
        seen = (-1, -1)
        while not self.stop.wait(self.every_s):
            try:
                if self.cancelled is not None and self.cancelled():
                    # Again at every poll: the job may not have been submitted yet.
                    self.session.sparkContext.cancelJobGroup(self.group)
                    continue
                done = total = 0
                for job in self.tracker.getJobIdsForGroup(self.group):
                    if job in self.before:
                        continue
                    info = self.tracker.getJobInfo(job)
                    if info is None:
                        continue
                    for sid in info.stageIds:
                        stage = self.tracker.getStageInfo(sid)
                        if stage is not None:
                            done += stage.numCompletedTasks
                            total += stage.numTasks
                if (done, total) != seen and total:
                    # Every task that finished since the last poll counts once: tasks that end
                    # within one poll still move the progress a step each.
                    first = seen[0] + 1 if seen[1] == total and seen[0] < done else done
                    seen = (done, total)
                    for finished in range(first, done + 1):
                        self.on_tasks(finished, total)
            except Exception:  # noqa: BLE001 - progress is best effort
                pass
