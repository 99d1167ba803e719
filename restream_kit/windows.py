"""Window declarations, where programs import them: ``from restream_kit.windows import ...``.

The declarations live in :mod:`restream_kit.model.windows`; this module keeps the public path.
"""

from __future__ import annotations

from .model import windows as _public
from .model.windows import *  # noqa: F403 (the names model.windows exports, listed there once)

__all__ = list(_public.__all__)
