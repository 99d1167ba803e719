"""Where a replay's pass tasks run: a classic session or Spark Connect, a local master whose
tasks share the kernel's disk, and the replay's own scratch directory on that disk."""

from __future__ import annotations

import tempfile
from typing import Any

from ....io.log import scratch_dir

__all__ = ["classic", "local_master", "replay_dir"]


def classic(session: Any) -> bool:
    try:
        session.sparkContext  # noqa: B018 - raises on Spark Connect
        return True
    except Exception:  # noqa: BLE001
        return False


def local_master(session: Any) -> bool:
    """Whether ``session`` runs its tasks on this machine (a classic session on ``local``):
    they then share the kernel's disk."""
    try:
        return session.sparkContext.master.startswith("local")
    except Exception:  # noqa: BLE001 - Spark Connect has no context here
        return False


def replay_dir() -> str:
    """A private directory of the kernel's scratch for one replay's values and start shares
    (removed when it ends, ``passes._driver.run_passes``)."""
    return tempfile.mkdtemp(dir=scratch_dir(), prefix="values-")
