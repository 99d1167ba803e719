"""How often a checkpointed replay commits: ``checkpoint_every=`` / ``--checkpoint-every``.

A number of events (``500000``) or a time (``"60s"``, the default; ``ms``, ``s``, ``min``/``m``,
``h``). The serial engine commits every epoch as it replays; the Spark engine runs its epochs
in waves of about this much work, each committed when it ends (``engines/spark/_waves.py``).
"""

from __future__ import annotations

import re
from typing import Any

from ..model.errors import RestreamError

__all__ = ["DEFAULT_EVERY", "parse_every", "describe_every", "check_every"]

#: How often a checkpointed replay commits when ``checkpoint_every`` is not given.
DEFAULT_EVERY = "60s"

_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|min|m|h)\s*$")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_every(spec: Any) -> tuple[str, float]:
    """``("events", n)`` or ``("time", seconds)`` from ``500000``, ``"60s"``, ``"5min"``...
    (``None``: the default, :data:`DEFAULT_EVERY`)."""
    if spec is None:
        spec = DEFAULT_EVERY
    if isinstance(spec, bool):
        raise RestreamError(f"checkpoint_every must be events or a time, got {spec!r}")
    if isinstance(spec, int) or (isinstance(spec, str) and spec.strip().isdigit()):
        n = int(spec)
        if n <= 0:
            raise RestreamError(f"checkpoint_every must be positive, got {spec!r}")
        return ("events", float(n))
    match = _TIME.match(str(spec))
    if not match or float(match.group(1)) <= 0:
        raise RestreamError(
            f"checkpoint_every {spec!r} is neither a number of events nor a time like 5s, "
            "60s, 5min, 1h"
        )
    return ("time", float(match.group(1)) * _SECONDS[match.group(2)])


def describe_every(every: tuple[str, float]) -> str:
    kind, size = every
    return f"{int(size):,} events" if kind == "events" else f"{size:g} s"


def check_every(every: Any, checkpoint: Any) -> None:
    """Refuse, in one line, a ``checkpoint_every`` that is not a size or has no checkpoint."""
    if every is None:
        return
    parse_every(every)
    if not checkpoint:
        raise RestreamError(
            "checkpoint_every needs a checkpoint directory (--checkpoint DIR, checkpoint=DIR)"
        )
