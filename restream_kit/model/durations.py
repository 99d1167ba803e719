"""Durations in milliseconds, the unit of the log's ``ts`` column."""

from __future__ import annotations

__all__ = ["milliseconds", "seconds", "minutes", "hours", "days"]


def milliseconds(n: float) -> int:
    """``n`` milliseconds."""
    return int(n)


def seconds(n: float) -> int:
    """``n`` seconds in milliseconds."""
    return int(n * 1_000)


def minutes(n: float) -> int:
    """``n`` minutes in milliseconds."""
    return int(n * 60_000)


def hours(n: float) -> int:
    """``n`` hours in milliseconds."""
    return int(n * 3_600_000)


def days(n: float) -> int:
    """``n`` days in milliseconds."""
    return int(n * 86_400_000)
