"""The runtime of the serial semantics, the one every engine and replay of the planner uses.

``semantics``: the rules, once (how a write applies, a write's and a schedule's checks, the
flush after the log and :data:`~.semantics.MAX_FLUSH`), and the runtime compiled handlers
call in the serial engine's shape (``SerialRuntime``: two heaps the inlined loop reads).
``guarded``: the rollback of a handler run that raises (``on_error`` skip or quarantine), one
journal (``RunJournal``) every runtime that rolls back keeps. ``positioned``: the same
runtime by position (one heap of timed writes and scheduled events, settling, the flush)
with pluggable sinks for where a write goes, which a Spark pass task adapts. ``loop``: a replay's loop set up once
(compile, scheduled runner, flush), for the serial engine, explanations and Spark plain
passes. ``quarantine``: the rows that record a rolled-back run, identical whichever engine
ran it.

May import: the program model and the compiler (``restream_kit.model``,
``restream_kit.compiler``). Never I/O, the planner, the engines or anything above them.
"""

from __future__ import annotations

from . import guarded, semantics
from .guarded import *  # noqa: F403 (what guarded exports, listed there once)
from .quarantine import ON_ERROR, check_on_error, event_fields, quarantine_row
from .semantics import *  # noqa: F403 (what semantics exports, listed there once)

__all__ = [
    *semantics.__all__,
    *guarded.__all__,
    "ON_ERROR",
    "check_on_error",
    "event_fields",
    "quarantine_row",
]
