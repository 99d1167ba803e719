"""The runtime of the serial semantics, the one every engine and replay of the planner uses.

``semantics``: the runtime compiled handlers call (timed writes, ``emit``, ``schedule``), the
order in which scheduled events and timed writes run, the flush after the log
(:data:`~.semantics.MAX_FLUSH`), the rollback of a handler run that raised (``on_error``), and
the loop that lets a caller wrap every handler run. ``quarantine``: the rows that record a
rolled-back run, identical whichever engine ran it.

May import: the program model and the compiler (``restream_kit.model``,
``restream_kit.compiler``). Never I/O, the planner, the engines or anything above them.
"""

from __future__ import annotations

from . import semantics
from .quarantine import ON_ERROR, check_on_error, event_fields, quarantine_row
from .semantics import *  # noqa: F403 (what semantics exports, listed there once)

__all__ = [*semantics.__all__, "ON_ERROR", "check_on_error", "event_fields", "quarantine_row"]
