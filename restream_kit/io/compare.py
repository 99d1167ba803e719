"""Compare two replays (``diff``): by row identity, or by the fields the user names.

By row (the default): a row's identity is (table, event, n): the event is (``lsn``, ``seq``)
and ``n`` counts that event's earlier rows in the same table (SPEC section 3), so ``n`` is 0
for an event's first row in a table, 1 for its second... Rows with the same identity in both
replays are "changed" when any other column differs.

By key (``diff(a, b, by=["sender"])``): per table, the keys (values of the ``by`` fields)
only in A, only in B, and in both with different rows, with the time of each key's first
row on each side and how far it moved: what a user means by "v2 flags the same senders,
earlier". The comparisons are polars joins, so they stay fast on millions of rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import polars as pl
import pyarrow as pa

from ._diff_rows import DERIVED, IDENTITY, Rows, tables_of
from ._key_diff import ROW_FIELDS, KeyDiff, TableKeyDiff, diff_by, format_moved, iso_time, parse_by
from ._parquet import read_parquet
from .result import Result

__all__ = [
    "diff",
    "Diff",
    "TableDiff",
    "KeyDiff",
    "TableKeyDiff",
    "IDENTITY",
    "format_moved",
    "load_run",
    "diff_by",
    "parse_by",
    "ROW_FIELDS",
]


@dataclass(frozen=True)
class TableDiff(Rows):
    """One table's differences; the frames hold the rows (``changed`` has both sides, the
    baseline's columns suffixed ``_baseline``). ``n`` is the row's rank among its event's
    rows in this table (0 for the first), which with ``lsn`` and ``seq`` identifies it."""

    table: str
    rows: int
    baseline_rows: int
    added: pl.DataFrame = field(repr=False)
    removed: pl.DataFrame = field(repr=False)
    changed: pl.DataFrame = field(repr=False)
    #: The name of the rank column: ``n``, or ``_n`` when the table has a field ``n``.
    rank: str = "n"

    FRAMES: ClassVar[tuple[str, ...]] = ("added", "removed", "changed")

    def text_lines(self, samples: int) -> list[str]:
        """This table in the plain-text report: the counts, then a few rows of each kind."""
        c = self.counts
        verdict = "identical" if self.empty else "differs"
        lines = [
            f"{self.table}: {self.rows:,} rows vs {self.baseline_rows:,} in the baseline, "
            f"{verdict} (+{c['added']:,} added, -{c['removed']:,} removed, "
            f"~{c['changed']:,} changed)"
        ]
        for kind in self.FRAMES:
            frame = getattr(self, kind)
            # The rank within its event only identifies a row: not shown; time is.
            shown = frame.drop([c for c in (self.rank, *DERIVED) if c in frame.columns])
            for row in shown.head(samples).iter_rows(named=True):
                if "ts" in row:
                    row = {"time": iso_time(row["ts"]), **row}
                lines.append(f"  {kind}: {row}")
        return lines


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
        return "\n".join(line for t in self.tables.values() for line in t.text_lines(samples))


def diff(
    run: Result | Mapping[str, Any],
    baseline: Result | Mapping[str, Any],
    by: str | Sequence[str] | None = None,
    *,
    labels: tuple[str, str] = ("A", "B"),
) -> Diff | KeyDiff:
    """Differences of ``run`` against ``baseline``: Results, or mappings of table name to table.

    Without ``by``, a :class:`Diff` by row identity (rows added in ``run``, removed from
    ``baseline``, changed). With ``by`` (a field or fields, ``"a,b"`` too), a :class:`KeyDiff`
    with ``run`` as A and ``baseline`` as B (``labels`` names them in its text).
    """
    if by is not None:
        return diff_by(run, baseline, by, labels=labels)
    ours, theirs = tables_of(run), tables_of(baseline)
    out = {}
    for name in list(dict.fromkeys([*theirs, *ours])):
        out[name] = _diff_table(name, ours.get(name), theirs.get(name))
    return Diff(out)


def with_identity(frame: pl.DataFrame, rank: str = "n") -> pl.DataFrame:
    """Add ``rank`` (``n``): the row's rank among its event's rows in this table, in order."""
    return frame.with_columns(pl.int_range(pl.len()).over("lsn", "seq").alias(rank))


def _rank_name(*frames: pl.DataFrame | None) -> str:
    """``n``, unless a table has a field called that: then ``_n`` (``__n``...), so that the
    user's field is compared like any other rather than replaced by the rank."""
    rank = "n"
    while any(f is not None and rank in f.columns for f in frames):
        rank = "_" + rank
    return rank


def _diff_table(name: str, ours: pl.DataFrame | None, theirs: pl.DataFrame | None) -> TableDiff:
    empty = pl.DataFrame(
        schema={"lsn": pl.Int64, "ts": pl.Int64, "handler": pl.String, "seq": pl.Int64}
    )
    rank = _rank_name(ours, theirs)
    identity = [*IDENTITY[:2], rank]
    ours = with_identity(ours if ours is not None else empty, rank)
    theirs = with_identity(theirs if theirs is not None else empty, rank)
    added = ours.join(theirs.select(identity), on=identity, how="anti")
    removed = theirs.join(ours.select(identity), on=identity, how="anti")
    others = [
        c
        for c in dict.fromkeys([*ours.columns, *theirs.columns])
        if c not in identity and c not in DERIVED
    ]
    both = ours.join(theirs, on=identity, how="inner", suffix="_baseline")
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
    return TableDiff(name, ours.height, theirs.height, added, removed, changed, rank)


def load_run(ref: str | Any, log: Any = None) -> tuple[str, dict[str, pa.Table]]:
    """The label and output tables of ``ref``: a directory of ``<table>.parquet`` files
    (``replay --out``), or the latest successful run of that name (or id) in the catalog (on
    ``log``, when there is one; a run on another log is a warning).

    Raises :class:`~restream_kit.model.errors.RestreamError` naming the directory or the
    catalog when there is no such run.
    """
    import warnings
    from pathlib import Path

    from ..model.errors import RestreamError
    from .catalog import Catalog

    ref = str(ref)
    path = Path(ref)
    if not path.is_dir():
        catalog = Catalog()
        record = None
        if log is not None:
            record = catalog.latest(ref, log_fingerprint=log.fingerprint)
        record = record or catalog.latest(ref) or _by_id(catalog, ref)
        if record is None or not record.outputs:
            raise RestreamError(
                f"{ref}: no such directory, and no successful run called {ref!r} in the "
                f"catalog ({catalog.path})"
            )
        if log is not None and record.log_fingerprint != log.fingerprint:
            warnings.warn(f"baseline {ref!r} ran on another log than this replay", stacklevel=2)
        path = Path(record.outputs)
        ref = f"{ref} ({record.run_id})" if record.run_id != ref else ref
    files = sorted(p for p in path.glob("*.parquet") if not p.name.startswith("_"))
    # A catalog run (manifest.json) or an --out directory (metrics.json) may have no table.
    if not files and not any((path / f).exists() for f in ("metrics.json", "manifest.json")):
        raise RestreamError(f"{path}: no <table>.parquet files (give a replay --out directory)")
    return ref, {p.stem: read_parquet(p) for p in files}


def _by_id(catalog: Any, run_id: str) -> Any:
    """The catalog's successful run whose id is ``run_id`` (None when there is none)."""
    from .catalog import RunRecord

    if not catalog.runs_dir.exists():
        return None
    rows = catalog.runs().filter(pl.col("run_id") == run_id, pl.col("status") == "ok")
    if not rows.height:
        return None
    row = rows.row(0, named=True)
    fields = RunRecord.__dataclass_fields__
    return RunRecord(**{k: row.get(k) for k in fields})
