"""Engines replay a compiled program over a log. ``serial`` is the reference; ``spark`` is parallel."""

from __future__ import annotations

from typing import Any

__all__ = ["ENGINES", "get_engine"]

ENGINES = ("serial", "spark")


def get_engine(name: str) -> Any:
    """The engine module called ``name``; Spark is imported only when asked for."""
    if name == "serial":
        from . import serial

        return serial
    if name == "spark":
        from . import spark

        return spark
    raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
