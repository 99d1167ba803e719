"""What both kinds of diff (``compare``, by row; ``_key_diff``, by key) read: a side's tables
as polars frames, the columns of a row's identity, and the counts of a table's differences."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import polars as pl
import pyarrow as pa

from .result import Result

__all__ = ["DERIVED", "IDENTITY", "Rows", "frame_of", "tables_of"]

IDENTITY = ("lsn", "seq", "n")
#: Columns derived from others (``time`` from ``ts``): never a difference on their own.
DERIVED = ("time",)


class Rows:
    """``counts`` and ``empty`` of a table's differences, whose rows are in the frames named
    by ``FRAMES``."""

    FRAMES: ClassVar[tuple[str, ...]] = ()

    @property
    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name).height for name in self.FRAMES}

    @property
    def empty(self) -> bool:
        return not any(getattr(self, name).height for name in self.FRAMES)


def tables_of(side: Result | Mapping[str, Any]) -> dict[str, pl.DataFrame]:
    """A Result's tables, or a mapping's, as polars frames."""
    tables = side.tables if isinstance(side, Result) else side
    return {name: frame_of(t) for name, t in tables.items()}


def frame_of(table: Any) -> pl.DataFrame:
    """A table (polars, Arrow, or what ``pl.DataFrame`` takes) as a polars frame."""
    if isinstance(table, pl.DataFrame):
        return table
    if isinstance(table, pa.Table):
        return pl.from_arrow(table)
    return pl.DataFrame(table)
