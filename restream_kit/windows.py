"""Window declarations, where programs import them: ``from restream_kit.windows import ...``.

The declarations live in :mod:`restream_kit.model.windows`; this module keeps the public path.
"""

from __future__ import annotations

from .model.windows import (
    AGGREGATES,
    Ewma,
    Hopping,
    Session,
    Sliding,
    Tumbling,
    Window,
    ewma,
    expanded_source,
    hopping,
    session,
    sliding,
    tumbling,
)

__all__ = [
    "AGGREGATES",
    "Window",
    "Tumbling",
    "Hopping",
    "Session",
    "Sliding",
    "Ewma",
    "tumbling",
    "hopping",
    "session",
    "sliding",
    "ewma",
    "expanded_source",
]
