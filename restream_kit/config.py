"""Where the Spark master and settings come from (profiles, environment, arguments).

The code lives in :mod:`restream_kit.io.config`; this module keeps the public path that
notebooks use (``from restream_kit import config``).
"""

from __future__ import annotations

from .io import config as _public
from .io.config import *  # noqa: F403 (the names io.config exports, listed there once)

__all__ = list(_public.__all__)
