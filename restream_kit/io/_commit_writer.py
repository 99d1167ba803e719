"""Commits written beside the replay: one thread per checkpoint, one commit at a time, in order.

A commit is files written and synced, a rename and the manifest replaced: mostly waiting
on the disk. The Spark engine hands its commits to a :class:`CommitWriter` and goes on with
the next epoch's fold or the next wave's jobs while they are written. Order stays safe: the
thread takes the commits one after the other as they were given, each complete (manifest
replaced) before the next begins, so the manifest only ever names epochs whose files are in
place, every epoch before them included. Once a commit fails, none after it is written (a
later epoch committed over a missing one would leave a gap in the rows a resume reads), and
the error is raised to the replay at its next commit or at :meth:`CommitWriter.wait`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

__all__ = ["CommitWriter"]


class CommitWriter:
    """Runs the commits given to :meth:`put` on a thread of its own, in order."""

    def __init__(self, name: str = "restream-commits"):
        self._todo: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        # A daemon: a replay that dies leaves its queued commits unwritten, which a resume
        # recomputes (what is written is whole: see the module docstring).
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, commit: Callable[[], None]) -> None:
        """Queue ``commit``; raise the error of one that failed before."""
        self._raise()
        self._todo.put(commit)

    def wait(self) -> None:
        """Return once every queued commit is written; raise the first that failed."""
        self._todo.join()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:  # (kept: every later call says it too)
            raise self._error

    def _run(self) -> None:
        failed = False
        while True:
            commit = self._todo.get()
            try:
                if not failed:
                    commit()
            except BaseException as exc:  # noqa: BLE001 - handed to the replay's thread
                failed, self._error = True, exc
            finally:
                self._todo.task_done()
