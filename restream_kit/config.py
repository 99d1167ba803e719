"""Where the Spark master and settings come from (profiles, environment, arguments).

The code lives in :mod:`restream_kit.io.config`; this module keeps the public path that
notebooks use (``from restream_kit import config``).
"""

from __future__ import annotations

from .io.config import (
    DEFAULT_EXECUTOR_WAIT,
    TOKEN_ENV,
    SparkTarget,
    parse_conf,
    profile_path,
    redact,
    resolve,
    with_token,
)

__all__ = [
    "SparkTarget",
    "resolve",
    "parse_conf",
    "profile_path",
    "redact",
    "with_token",
    "TOKEN_ENV",
    "DEFAULT_EXECUTOR_WAIT",
]
