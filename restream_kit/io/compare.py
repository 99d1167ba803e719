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
]

IDENTITY = ("lsn", "seq", "n")
#: Columns derived from others (``time`` from ``ts``): never a difference on their own.
DERIVED = ("time",)


class _Rows:
    """``counts`` and ``empty`` of a table's differences, whose rows are in the frames named
    by ``FRAMES``."""

    FRAMES: ClassVar[tuple[str, ...]] = ()

    @property
    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name).height for name in self.FRAMES}

    @property
    def empty(self) -> bool:
        return not any(getattr(self, name).height for name in self.FRAMES)


@dataclass(frozen=True)
class TableDiff(_Rows):
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
                # The rank within its event only identifies a row: not shown; time is.
                shown = frame.drop([c for c in (t.rank, *DERIVED) if c in frame.columns])
                for row in shown.head(samples).iter_rows(named=True):
                    if "ts" in row:
                        row = {"time": _iso(row["ts"]), **row}
                    lines.append(f"  {kind}: {row}")
        return "\n".join(lines)


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


# -- by key ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableKeyDiff(_Rows):
    """One table compared by key (the values of the ``by`` fields).

    - ``only_a`` / ``only_b``: keys with rows on one side only; columns: the ``by`` fields,
      ``first_ts`` (the key's first row, ms since the epoch) and ``rows`` (its row count);
    - ``changed``: keys on both sides whose rows differ; columns: the ``by`` fields,
      ``first_ts_a`` and ``first_ts_b`` (the key's first row on each side), ``moved_ms``
      (``first_ts_b - first_ts_a``: positive when A has the key earlier), ``rows_a`` and
      ``rows_b`` (row counts), and ``first_diff_ts`` (the earliest row on either side that the
      other side does not have).

    Rows are compared on every column but the derived ``time``.
    """

    table: str
    by: tuple[str, ...]
    only_a: pl.DataFrame = field(repr=False)
    only_b: pl.DataFrame = field(repr=False)
    changed: pl.DataFrame = field(repr=False)
    #: Keys on both sides with identical rows.
    same: int = 0

    FRAMES: ClassVar[tuple[str, ...]] = ("only_a", "only_b", "changed")

    @property
    def counts(self) -> dict[str, int]:
        return {**super().counts, "same": self.same}

    def moved(self) -> dict[str, int]:
        """Changed keys by direction: ``earlier`` / ``later`` in A, ``same_time``."""
        m = self.changed.get_column("moved_ms") if self.changed.height else pl.Series([])
        return {
            "earlier": int((m > 0).sum()) if len(m) else 0,
            "later": int((m < 0).sum()) if len(m) else 0,
            "same_time": int((m == 0).sum()) if len(m) else 0,
        }

    def to_dict(self, samples: int | None = None) -> dict[str, Any]:
        """JSON-able: counts, and the keys (all, or the first ``samples``) with ISO times."""

        def rows(frame: pl.DataFrame) -> list[dict]:
            frame = frame if samples is None else frame.head(samples)
            return [_jsonable(r) for r in frame.iter_rows(named=True)]

        return {
            "table": self.table,
            "by": list(self.by),
            "counts": self.counts,
            "moved": self.moved(),
            "only_a": rows(self.only_a),
            "only_b": rows(self.only_b),
            "changed": rows(self.changed),
        }


@dataclass(frozen=True)
class KeyDiff:
    """Two replays compared by key, per output table (see :class:`TableKeyDiff`).

    ``a`` and ``b`` name the two sides in text; ``skipped`` holds tables without every ``by``
    field, with the reason.
    """

    by: tuple[str, ...]
    tables: dict[str, TableKeyDiff]
    a: str = "A"
    b: str = "B"
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return all(t.empty for t in self.tables.values())

    def summary(self, samples: int = 3) -> str:
        """A plain-text report: per table, counts, then a few keys of each kind."""
        by = ", ".join(self.by)
        lines = [f"{self.a} vs {self.b}, by {by}:"]
        for name, t in self.tables.items():
            c = t.counts
            verdict = "same keys, same rows" if t.empty else "differs"
            lines.append(
                f"{name}: {verdict}: {c['only_a']:,} keys only in {self.a}, {c['only_b']:,} only "
                f"in {self.b}, {c['changed']:,} in both with different rows, {c['same']:,} "
                "identical"
            )
            mv = t.moved()
            if t.changed.height:
                lines.append(
                    f"  of the changed keys, {self.a} has {mv['earlier']:,} earlier, "
                    f"{mv['later']:,} later, {mv['same_time']:,} at the same first time"
                )
            for row in t.changed.head(samples).iter_rows(named=True):
                key = _key_text(row, self.by)
                lines.append(
                    f"  changed {key}: first row {format_moved(row['moved_ms'], self.a, self.b)} "
                    f"({_iso(row['first_ts_a'])} vs {_iso(row['first_ts_b'])}), "
                    f"{_rows(row['rows_a'])} vs {row['rows_b']:,}, first difference at "
                    f"{_iso(row['first_diff_ts'])}"
                )
            for side, frame in ((self.a, t.only_a), (self.b, t.only_b)):
                for row in frame.head(samples).iter_rows(named=True):
                    lines.append(
                        f"  only in {side} {_key_text(row, self.by)}: first at "
                        f"{_iso(row['first_ts'])}, {_rows(row['rows'])}"
                    )
        for name, reason in self.skipped.items():
            lines.append(f"{name}: not compared ({reason})")
        if not self.tables and not self.skipped:
            lines.append("no output tables on either side")
        return "\n".join(lines)

    text = summary

    def __repr__(self) -> str:
        return self.summary()

    def to_dict(self, samples: int | None = None) -> dict[str, Any]:
        """JSON-able: ``by``, ``a``, ``b``, per table :meth:`TableKeyDiff.to_dict`, skipped."""
        return {
            "by": list(self.by),
            "a": self.a,
            "b": self.b,
            "empty": self.empty,
            "tables": {n: t.to_dict(samples) for n, t in self.tables.items()},
            "skipped": dict(self.skipped),
        }


def format_moved(moved_ms: int, a: str = "A", b: str = "B") -> str:
    """``moved_ms`` (B's first time minus A's) in words: ``3 h earlier in A than in B``."""
    if moved_ms == 0:
        return f"at the same time in {a} and {b}"
    word = "earlier" if moved_ms > 0 else "later"
    return f"{_duration(abs(moved_ms))} {word} in {a} than in {b}"


def _duration(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size:
            value = ms / size
            return (
                f"{value:.0f} {unit}"
                if value >= 10 or value == int(value)
                else f"{value:.1f} {unit}"
            )
    return f"{ms} ms"


def _iso(ts: int | None) -> str:
    if ts is None:
        return "-"
    import datetime as dt

    when = dt.datetime.fromtimestamp(ts / 1000, tz=dt.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _rows(n: int) -> str:
    return f"{n:,} row" + ("" if n == 1 else "s")


def _key_text(row: Mapping[str, Any], by: Sequence[str]) -> str:
    return ", ".join(f"{f}={row[f]!r}" for f in by)


def _jsonable(row: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in row.items():
        out[k] = v if isinstance(v, (int, float, str, bool, type(None))) else str(v)
        if k.startswith("first_ts") or k == "first_diff_ts":
            out[k.replace("_ts", "_time")] = _iso(v)
    return out


def parse_by(by: str | Sequence[str]) -> tuple[str, ...]:
    """``"a,b"``, ``"a"`` or ``["a", "b"]`` as a tuple of field names."""
    items = [by] if isinstance(by, str) else list(by)
    fields = tuple(f.strip() for item in items for f in str(item).split(",") if f.strip())
    if not fields:
        from ..model.errors import RestreamError

        raise RestreamError("by: give at least one field name")
    return fields


def diff_by(
    a: Result | Mapping[str, Any],
    b: Result | Mapping[str, Any],
    by: str | Sequence[str],
    *,
    labels: tuple[str, str] = ("A", "B"),
) -> KeyDiff:
    """Compare ``a`` and ``b`` by the values of the ``by`` fields, per table (:class:`KeyDiff`).

    A table where neither side has every ``by`` field is skipped (``KeyDiff.skipped``); when no
    table has them, :class:`~restream_kit.model.errors.RestreamError` names the fields there are.
    """
    from ..model.errors import RestreamError

    fields = parse_by(by)
    ours, theirs = _tables(a), _tables(b)
    tables: dict[str, TableKeyDiff] = {}
    skipped: dict[str, str] = {}
    for name in dict.fromkeys([*ours, *theirs]):
        sides = [t for t in (ours.get(name), theirs.get(name)) if t is not None]
        missing = [f for f in fields if not any(f in t.columns for t in sides)]
        if missing:
            have = sorted({c for t in sides for c in t.columns} - {*ROW_FIELDS, *DERIVED})
            skipped[name] = (
                f"no field {', '.join(missing)}; its fields: {', '.join(have) or 'none'}"
            )
            continue
        tables[name] = _diff_table_by(name, fields, ours.get(name), theirs.get(name))
    if not tables and skipped:
        raise RestreamError(
            f"by {', '.join(fields)}: no table has "
            f"{'that field' if len(fields) == 1 else 'those fields'} ("
            + "; ".join(f"{n}: {r}" for n, r in skipped.items())
            + ")"
        )
    return KeyDiff(fields, tables, labels[0], labels[1], skipped)


ROW_FIELDS = ("lsn", "ts", "handler", "seq")


def _diff_table_by(
    name: str, by: tuple[str, ...], a: pl.DataFrame | None, b: pl.DataFrame | None
) -> TableKeyDiff:
    a = _aligned(a, b, by)
    b = _aligned(b, a, by)
    for f in by:  # keys typed differently on the two sides (1 vs 1.0) compare as text
        if a.schema[f] != b.schema[f]:
            a, b = (x.with_columns(pl.col(f).cast(pl.String)) for x in (a, b))
    compared = [c for c in a.columns if c not in DERIVED]
    # One hash per row over every compared column; a key's rows are its sorted hashes.
    a = a.with_columns(pl.struct(compared).hash(seed=0).alias("_h"))
    b = b.with_columns(pl.struct(compared).hash(seed=0).alias("_h"))
    keys_a = a.group_by(by, maintain_order=True).agg(
        pl.col("ts").min().alias("first_ts"), pl.len().alias("rows"), pl.col("_h").sort()
    )
    keys_b = b.group_by(by, maintain_order=True).agg(
        pl.col("ts").min().alias("first_ts"), pl.len().alias("rows"), pl.col("_h").sort()
    )
    only_a = keys_a.join(keys_b.select(by), on=list(by), how="anti", nulls_equal=True)
    only_b = keys_b.join(keys_a.select(by), on=list(by), how="anti", nulls_equal=True)
    both = keys_a.join(keys_b, on=list(by), how="inner", suffix="_b", nulls_equal=True)
    differ = both.filter(pl.col("_h") != pl.col("_h_b"))
    changed = differ.select(
        *by,
        pl.col("first_ts").alias("first_ts_a"),
        pl.col("first_ts_b"),
        (pl.col("first_ts_b") - pl.col("first_ts")).alias("moved_ms"),
        pl.col("rows").cast(pl.Int64).alias("rows_a"),
        pl.col("rows_b").cast(pl.Int64),
    )
    changed = changed.join(_first_diff(a, b, by), on=list(by), how="left", nulls_equal=True)
    changed = changed.sort("first_ts_a", "first_ts_b")
    columns = [*by, "first_ts", "rows"]
    return TableKeyDiff(
        name,
        by,
        only_a.select(columns).with_columns(pl.col("rows").cast(pl.Int64)).sort("first_ts"),
        only_b.select(columns).with_columns(pl.col("rows").cast(pl.Int64)).sort("first_ts"),
        changed,
        same=both.height - differ.height,
    )


def _first_diff(a: pl.DataFrame, b: pl.DataFrame, by: tuple[str, ...]) -> pl.DataFrame:
    """Per key, the earliest ``ts`` of a row one side has and the other does not."""
    on = [*by, "_h"]
    extra = pl.concat(
        [
            a.join(b.select(on), on=on, how="anti", nulls_equal=True).select(*by, "ts"),
            b.join(a.select(on), on=on, how="anti", nulls_equal=True).select(*by, "ts"),
        ]
    )
    return extra.group_by(by).agg(pl.col("ts").min().alias("first_diff_ts"))


def _aligned(frame: pl.DataFrame | None, other: pl.DataFrame | None, by: tuple[str, ...]):
    """``frame`` with every column ``other`` has (null where missing), in one order."""
    if frame is None:
        frame = pl.DataFrame(schema={"lsn": pl.Int64, "ts": pl.Int64, "handler": pl.String})
    frame = frame.drop([c for c in DERIVED if c in frame.columns])
    if other is not None:
        other = other.drop([c for c in DERIVED if c in other.columns])
        for col in other.columns:
            if col not in frame.columns:
                frame = frame.with_columns(pl.lit(None, dtype=other.schema[col]).alias(col))
    return frame.select(sorted(frame.columns))


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
