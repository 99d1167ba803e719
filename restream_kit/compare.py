"""Compare two replays (``diff``) by row identity: which output rows were added, removed or changed.

A row's identity is (table, event, n): the event is (``lsn``, ``seq``) and ``n`` counts that
event's earlier rows in the same table (SPEC section 3). Rows with the same identity in both
replays are "changed" when any other column differs. The comparison is a polars join, so it
stays fast on millions of rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow as pa

from .result import Result

__all__ = ["diff", "Diff", "TableDiff", "IDENTITY"]

IDENTITY = ("lsn", "seq", "n")


@dataclass(frozen=True)
class TableDiff:
    """One table's differences; the frames hold the rows (``changed`` has both sides)."""

    table: str
    rows: int
    baseline_rows: int
    added: pl.DataFrame = field(repr=False)
    removed: pl.DataFrame = field(repr=False)
    changed: pl.DataFrame = field(repr=False)

    @property
    def counts(self) -> dict[str, int]:
        return {
            "added": self.added.height,
            "removed": self.removed.height,
            "changed": self.changed.height,
        }

    @property
    def empty(self) -> bool:
        return not (self.added.height or self.removed.height or self.changed.height)


@dataclass(frozen=True)
class Diff:
    """Differences per output table between a run and its baseline."""

    tables: dict[str, TableDiff]

    @property
    def empty(self) -> bool:
        return all(t.empty for t in self.tables.values())

    def summary(self) -> dict[str, dict[str, int]]:
        return {name: t.counts for name, t in self.tables.items()}

    def timeline(self, buckets: int = 50) -> pl.DataFrame:
        """Differences counted per time bucket: columns ``table``, ``kind``, ``ts``, ``rows``."""
        frames = []
        for name, t in self.tables.items():
            for kind, frame in (("added", t.added), ("removed", t.removed), ("changed", t.changed)):
                if frame.height:
                    ts = frame.get_column("ts")
                    frames.append(pl.DataFrame({"table": name, "kind": kind, "ts": ts}))
        if not frames:
            return pl.DataFrame(
                schema={"table": pl.String, "kind": pl.String, "ts": pl.Int64, "rows": pl.UInt32}
            )
        all_rows = pl.concat(frames)
        lo, hi = all_rows["ts"].min(), all_rows["ts"].max()
        width = max(1, -(-(hi - lo + 1) // buckets))
        return (
            all_rows.with_columns((pl.col("ts") - (pl.col("ts") - lo) % width).alias("ts"))
            .group_by("table", "kind", "ts")
            .agg(pl.len().alias("rows"))
            .sort("ts", "table", "kind")
        )

    def text(self, samples: int = 3) -> str:
        """A plain-text report, for terminals and logs."""
        if not self.tables:
            return "no output tables on either side"
        lines = []
        for name, t in self.tables.items():
            c = t.counts
            verdict = "identical" if t.empty else "differs"
            lines.append(
                f"{name}: {t.rows:,} rows vs {t.baseline_rows:,} in the baseline, {verdict} "
                f"(+{c['added']:,} added, -{c['removed']:,} removed, ~{c['changed']:,} changed)"
            )
            for kind in ("added", "removed", "changed"):
                frame = getattr(t, kind)
                for row in frame.head(samples).iter_rows(named=True):
                    lines.append(f"  {kind}: {row}")
        return "\n".join(lines)


def diff(run: Result | Mapping[str, Any], baseline: Result | Mapping[str, Any]) -> Diff:
    """Differences of ``run`` against ``baseline``: Results, or mappings of table name to table."""
    ours, theirs = _tables(run), _tables(baseline)
    out = {}
    for name in list(dict.fromkeys([*theirs, *ours])):
        out[name] = _diff_table(name, ours.get(name), theirs.get(name))
    return Diff(out)


def _tables(side: Result | Mapping[str, Any]) -> dict[str, pl.DataFrame]:
    tables = side.tables if isinstance(side, Result) else side
    return {name: _frame(t) for name, t in tables.items()}


def _frame(table: Any) -> pl.DataFrame:
    if isinstance(table, pl.DataFrame):
        return table
    if isinstance(table, pa.Table):
        return pl.from_arrow(table)
    return pl.DataFrame(table)


def with_identity(frame: pl.DataFrame) -> pl.DataFrame:
    """Add ``n``: the row's rank among its event's rows in this table, in table order."""
    return frame.with_columns(pl.int_range(pl.len()).over("lsn", "seq").alias("n"))


def _diff_table(name: str, ours: pl.DataFrame | None, theirs: pl.DataFrame | None) -> TableDiff:
    empty = pl.DataFrame(
        schema={"lsn": pl.Int64, "ts": pl.Int64, "handler": pl.String, "seq": pl.Int64}
    )
    ours = with_identity(ours if ours is not None else empty)
    theirs = with_identity(theirs if theirs is not None else empty)
    added = ours.join(theirs.select(IDENTITY), on=IDENTITY, how="anti")
    removed = theirs.join(ours.select(IDENTITY), on=IDENTITY, how="anti")
    others = [c for c in dict.fromkeys([*ours.columns, *theirs.columns]) if c not in IDENTITY]
    both = ours.join(theirs, on=IDENTITY, how="inner", suffix="_baseline")
    changed_mask = pl.lit(False)
    for col in others:
        # A column only one side has compares against null on the other side.
        mine = pl.col(col) if col in ours.columns else pl.lit(None)
        if col in ours.columns and col in theirs.columns:
            base = pl.col(f"{col}_baseline")
        else:
            base = pl.col(col) if col in theirs.columns else pl.lit(None)
        changed_mask = changed_mask | mine.ne_missing(base)
    changed = both.filter(changed_mask) if both.height else both
    return TableDiff(name, ours.height, theirs.height, added, removed, changed)
