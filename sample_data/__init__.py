"""Sample event logs for trying and benchmarking restream_kit.

``sample_data.social`` generates the social-network log of the ReStream paper's evaluation
(friendships and messages); ``social_small.parquet`` is a 50,000-event sample of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["generate", "write", "SMALL"]

#: The committed 50,000-event sample (see README.md for the command that made it).
SMALL = Path(__file__).with_name("social_small.parquet")


def __getattr__(name: str) -> Any:
    # Imported on first use, so that ``python -m sample_data.social`` runs the module only once.
    if name in ("generate", "write"):
        from . import social

        return getattr(social, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
