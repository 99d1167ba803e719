"""Compare two replays by the fields the user names (``diff(a, b, by=...)``): per table, the
keys only in A, only in B, and in both with different rows, with the time of each key's first
row on each side and how far it moved (see :mod:`restream_kit.io.compare`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import polars as pl

from ._diff_rows import DERIVED, Rows, tables_of
from .result import Result

__all__ = [
    "KeyDiff",
    "ROW_FIELDS",
    "TableKeyDiff",
    "diff_by",
    "format_moved",
    "iso_time",
    "parse_by",
]


@dataclass(frozen=True)
class TableKeyDiff(Rows):
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

    def text_lines(self, samples: int, a: str, b: str) -> list[str]:
        """This table in the plain-text report (the sides called ``a`` and ``b``): the counts,
        where the changed keys moved, then a few keys of each kind."""
        c = self.counts
        verdict = "same keys, same rows" if self.empty else "differs"
        lines = [
            f"{self.table}: {verdict}: {c['only_a']:,} keys only in {a}, {c['only_b']:,} only "
            f"in {b}, {c['changed']:,} in both with different rows, {c['same']:,} identical"
        ]
        mv = self.moved()
        if self.changed.height:
            lines.append(
                f"  of the changed keys, {a} has {mv['earlier']:,} earlier, "
                f"{mv['later']:,} later, {mv['same_time']:,} at the same first time"
            )
        for row in self.changed.head(samples).iter_rows(named=True):
            lines.append(
                f"  changed {_key_text(row, self.by)}: first row "
                f"{format_moved(row['moved_ms'], a, b)} "
                f"({iso_time(row['first_ts_a'])} vs {iso_time(row['first_ts_b'])}), "
                f"{_rows(row['rows_a'])} vs {row['rows_b']:,}, first difference at "
                f"{iso_time(row['first_diff_ts'])}"
            )
        for side, frame in ((a, self.only_a), (b, self.only_b)):
            for row in frame.head(samples).iter_rows(named=True):
                lines.append(
                    f"  only in {side} {_key_text(row, self.by)}: first at "
                    f"{iso_time(row['first_ts'])}, {_rows(row['rows'])}"
                )
        return lines

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
        for t in self.tables.values():
            lines += t.text_lines(samples, self.a, self.b)
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


def iso_time(ts: int | None) -> str:
    """A time in epoch milliseconds as ISO-8601 UTC text (``-`` for none)."""
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
            out[k.replace("_ts", "_time")] = iso_time(v)
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
    ours, theirs = tables_of(a), tables_of(b)
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
