"""Score a rule against what really happened (``rk.score``): precision, recall, time to detect.

Labels are the cases a team confirmed (spammers banned after review, fraud cases, incidents):
a table with the key column(s), optionally a time and a class (:mod:`._labels`). Every output
table that has the ``by`` fields is scored at the level of keys, as a fraud team's review and
scikit-learn's ``precision_recall_fscore_support`` count them:

- a key with at least one row (alert) in the table is *alerted*; alerted and labelled is a
  true positive (TP), alerted only a false positive (FP), labelled only a false negative (FN);
- precision ``TP / (TP + FP)``, recall ``TP / (TP + FN)``, F1 ``2 TP / (2 TP + FP + FN)``
  (None where the denominator is 0, where scikit-learn warns);
- alerts (rows) and alerts per day of the run (the run's log span, or its rows' span);
- time to detect, with a label time: a TP's first alert minus its label time; its median and
  90th percentile over the TPs alerted at or after the label time, and those alerted before
  it counted as ``early``; with ``window=``, ``timely`` TPs (alerted no later than the window
  after the label time, early ones included) and ``late`` ones;
- per time bucket (``bucket=``, a day by default), so that drift shows: keys first alerted in
  the bucket and their precision, positives labelled in the bucket and their recall.

Every number is a polars join or group-by over the tables (:mod:`._score_frames`), never a
Python loop over rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..io.compare import ROW_FIELDS, load_run, parse_by
from ..io.epochs import parse_epoch
from ..io.result import Result
from ..model.errors import RestreamError
from ._labels import Labels, read_labels
from ._score_frames import BUCKET_COLUMNS, buckets, counts, key_outcomes

__all__ = [
    "score",
    "Scores",
    "TableScore",
    "Labels",
    "read_labels",
    "changed_keys",
    "pareto_front",
    "score_sweep",
    "parse_window",
    "format_duration",
    "DAY_MS",
]

DAY_MS = 86_400_000
#: What :meth:`TableScore.to_dict` says after the table and the key fields, in its order.
_SAID = (
    "tp",
    "fp",
    "fn",
    "precision",
    "recall",
    "f1",
    "alerted_keys",
    "positives",
    "alerts",
    "alerts_on_positives",
    "alerts_per_day",
    "early",
    "timely",
    "late",
    "timely_recall",
    "delay_p50_ms",
    "delay_p90_ms",
)


@dataclass(frozen=True)
class TableScore:
    """One output table's scores against the labels (see the module docstring)."""

    table: str
    by: tuple[str, ...]
    tp: int
    fp: int
    fn: int
    alerts: int
    alerts_on_positives: int
    alerts_per_day: float | None
    early: int
    #: With ``window=`` and label times: TPs alerted within the window (early included), and
    #: TPs alerted after it; None otherwise.
    timely: int | None
    late: int | None
    delay_p50_ms: float | None
    delay_p90_ms: float | None

    @property
    def alerted_keys(self) -> int:
        return self.tp + self.fp

    @property
    def positives(self) -> int:
        return self.tp + self.fn

    @property
    def precision(self) -> float | None:
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float | None:
        return _ratio(self.tp, self.tp + self.fn)

    @property
    def f1(self) -> float | None:
        return _ratio(2 * self.tp, 2 * self.tp + self.fp + self.fn)

    @property
    def delay_median_ms(self) -> float | None:
        return self.delay_p50_ms

    @property
    def timely_recall(self) -> float | None:
        """Positives alerted in time, over all positives (None without a window)."""
        return None if self.timely is None else _ratio(self.timely, self.positives)

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "by": list(self.by), **{k: getattr(self, k) for k in _SAID}}

    def summary(self) -> str:
        """One line: precision, recall, F1, the counts, alert volume and time to detect."""
        line = (
            f"{self.table} by {', '.join(self.by)}: precision {_num(self.precision)}, recall "
            f"{_num(self.recall)}, F1 {_num(self.f1)} ({self.tp:,} TP, {self.fp:,} FP, "
            f"{self.fn:,} FN); {self.alerts:,} alerts"
        )
        if self.alerts_per_day is not None:
            line += f" ({self.alerts_per_day:,.1f}/day)"
        if self.delay_p50_ms is not None:
            line += (
                f"; detected after {format_duration(self.delay_p50_ms)} median, "
                f"{format_duration(self.delay_p90_ms)} p90"
            )
        if self.early:
            line += f"; {self.early:,} early"
        if self.timely is not None:
            line += f"; {self.timely:,} timely, {self.late:,} late"
        return line


@dataclass(frozen=True)
class Scores:
    """A run scored against labels: per table (``tables``), per key (``by_key``: ``table``,
    the ``by`` fields, ``label_ts``, ``first_alert_ts``, ``alerts``, ``outcome``,
    ``delay_ms``, ``early``, ``timely``, ``first_row``) and per time bucket (``buckets``: ``table`` then
    ``bucket_ts``, ``alerts``, ``first_alerted``, ``tp``, ``fp``, ``precision``,
    ``positives``, ``caught``, ``recall``). ``skipped`` holds tables without the ``by``
    fields, with the reason."""

    by: tuple[str, ...]
    tables: dict[str, TableScore]
    by_key: pl.DataFrame = field(repr=False)
    buckets: pl.DataFrame = field(repr=False)
    labels: Labels = field(repr=False)
    run: str = "run"
    window_ms: int | None = None
    bucket_ms: int = DAY_MS
    span_ms: int | None = None
    skipped: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, table: str) -> TableScore:
        return self.tables[table]

    def summary(self) -> str:
        """One line per scored table (and one per skipped table)."""
        lines = [t.summary() for t in self.tables.values()]
        lines += [f"{name}: not scored ({why})" for name, why in self.skipped.items()]
        return "\n".join(lines)

    text = summary

    def __repr__(self) -> str:
        head = f"<Scores of {self.run} against {self.labels.positives:,} labelled keys>"
        return head + "\n" + self.summary()

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython's plain-text display
        printer.text(repr(self))

    def to_dict(self, keys: bool = False) -> dict[str, Any]:
        """JSON-able: the labels read, per table its scores and time buckets (and its keys'
        outcomes with ``keys=True``)."""
        tables = {}
        for name, t in self.tables.items():
            tables[name] = t.to_dict()
            mine = self.buckets.filter(pl.col("table") == name).drop("table")
            tables[name]["buckets"] = mine.to_dicts()
            if keys:
                rows = self.by_key.filter(pl.col("table") == name).drop("table")
                tables[name]["keys"] = [_jsonable(r) for r in rows.iter_rows(named=True)]
        return {
            "run": self.run,
            "by": list(self.by),
            "labels": self.labels.to_dict(),
            "window_ms": self.window_ms,
            "bucket_ms": self.bucket_ms,
            "span_ms": self.span_ms,
            "tables": tables,
            "skipped": dict(self.skipped),
        }


def parse_window(window: int | str | None, what: str = "window") -> int | None:
    """A duration as milliseconds: an int (ms), or ``"30s"``, ``"15min"``, ``"1h"``, ``"1d"``."""
    if window is None:
        return None
    if isinstance(window, bool):
        raise RestreamError(f"{what} {window!r} is not a duration")
    if isinstance(window, (int, float)):
        if window <= 0:
            raise RestreamError(f"{what} must be positive, not {window!r}")
        return int(window)
    try:
        parsed = parse_epoch(window)
    except RestreamError:
        parsed = None
    if parsed is None or parsed[0] != "time":
        raise RestreamError(f"{what} {window!r} is not a duration like 30s, 15min, 1h or 1d")
    return parsed[1]


def score(
    run: Result | Mapping[str, Any] | str | Path,
    labels: Any,
    by: str | Sequence[str],
    *,
    ts: str | None = None,
    class_column: str | None = None,
    positive: Any = None,
    window: int | str | None = None,
    bucket: int | str = "1d",
    name: str | None = None,
) -> Scores:
    """Score ``run`` against ``labels`` by the key fields ``by`` (see the module docstring).

    ``run`` is a :class:`Result`, a mapping of table name to table, a run name or id in the
    catalog, or a ``replay --out`` directory. ``labels`` is a Parquet or CSV path, the name of
    packaged sample labels (``social_small_labels``), or a polars, pandas or pyarrow table
    with a column per ``by`` field (``"a,b"`` or a list for several). ``ts`` names its time
    column (default ``ts`` if it has one), ``class_column`` its class column (default
    ``class`` if present) and ``positive`` the class value of positives (default: every row
    with a class, or a true boolean class). ``window`` (ms or ``"1h"``) counts an alert as
    timely; ``bucket`` (ms or ``"1d"``) is the width of the time buckets.
    """
    fields = parse_by(by)
    read = read_labels(labels, fields, ts=ts, class_column=class_column, positive=positive)
    label, frames, span_ms = _run_tables(run)
    return _score_tables(
        frames,
        read,
        run=name or label,
        span_ms=span_ms,
        window_ms=parse_window(window),
        bucket_ms=parse_window(bucket, "bucket") or DAY_MS,
    )


def _run_tables(run: Any) -> tuple[str, dict[str, pl.DataFrame], int | None]:
    """The run's label, its tables (polars, with their columns even when empty), its span."""
    if isinstance(run, Result):
        # The engine's tables as they are; result[name] for a table that got no row (its
        # columns from the program's emit calls).
        frames = {
            n: _frame(run.tables[n]) if n in run.tables else run[n].drop("time", strict=False)
            for n in run.table_names
        }
        return run.path or "run", frames, run.metrics.span_ms
    if isinstance(run, Mapping):
        return "run", {n: _frame(t) for n, t in run.items()}, None
    if isinstance(run, (str, Path)):
        label, tables = load_run(run)
        return label, {n: _frame(t) for n, t in tables.items()}, None
    raise RestreamError(
        f"score: the run must be a Result, a run name, or an --out directory, not "
        f"{type(run).__name__}"
    )


def _frame(table: Any) -> pl.DataFrame:
    return table if isinstance(table, pl.DataFrame) else pl.DataFrame(pl.from_arrow(table))


def _score_tables(
    frames: dict[str, pl.DataFrame],
    labels: Labels,
    *,
    run: str,
    span_ms: int | None,
    window_ms: int | None,
    bucket_ms: int,
) -> Scores:
    by = labels.by
    scored: dict[str, TableScore] = {}
    skipped: dict[str, str] = {}
    keyed, bucketed = [], []
    if span_ms is None:
        span_ms = _rows_span(frames.values())
    for name, frame in frames.items():
        missing = [f for f in by if f not in frame.columns]
        if missing or "ts" not in frame.columns:
            have = sorted(set(frame.columns) - {*ROW_FIELDS, "time"})
            skipped[name] = f"no field {', '.join(missing or ['ts'])}; its fields: " + (
                ", ".join(have) or "none"
            )
            continue
        ids = [c for c in ("lsn", "seq") if c in frame.columns and c not in by]
        alerts = frame.select(*by, pl.col("ts").cast(pl.Int64), *ids)
        window = window_ms if labels.timed else None
        by_key = key_outcomes(alerts, labels.frame, by, window, name)
        c = counts(by_key, alerts.height, windowed=window is not None)
        per_day = c["alerts"] * DAY_MS / span_ms if span_ms else None  # type: ignore[operator]
        scored[name] = TableScore(table=name, by=by, alerts_per_day=per_day, **c)  # type: ignore[arg-type]
        keyed.append(by_key.with_columns(pl.lit(name).alias("table")))
        bucketed.append(
            buckets(alerts, by_key, bucket_ms).with_columns(pl.lit(name).alias("table"))
        )
    if not scored:
        raise RestreamError(
            f"score by {', '.join(by)}: no output table has "
            + ("that field" if len(by) == 1 else "those fields")
            + (" (" + "; ".join(f"{n}: {r}" for n, r in skipped.items()) + ")" if skipped else "")
        )
    by_key = pl.concat(keyed, how="diagonal_relaxed")
    by_key = by_key.select("table", *[c for c in by_key.columns if c != "table"])
    bucket_frame = pl.concat(bucketed).select("table", *BUCKET_COLUMNS)
    return Scores(
        by, scored, by_key, bucket_frame, labels, run, window_ms, bucket_ms, span_ms, skipped
    )


def _rows_span(frames: Any) -> int | None:
    """From the earliest to the latest row of any table (the run's span when not known)."""
    lo = hi = None
    for f in frames:
        if "ts" in f.columns and f.height:
            a, b = f.get_column("ts").min(), f.get_column("ts").max()
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
    return None if lo is None else int(hi - lo)  # type: ignore[operator]


# -- comparing and choosing --------------------------------------------------------------------

#: How a key's outcome moved from a baseline to a run (``changed_keys``).
CHANGES = {
    ("fn", "tp"): "newly caught",
    ("tp", "fn"): "newly missed",
    (None, "fp"): "new false alarm",
    ("fp", None): "false alarm gone",
}


def changed_keys(run: Scores, baseline: Scores) -> pl.DataFrame:
    """Keys whose class changed from ``baseline`` to ``run``, per table both scored: columns
    ``table``, the ``by`` fields, ``baseline`` and ``run`` (their outcomes, null where the key
    is not in that side's keys), ``change`` (``newly caught``, ``newly missed``, ``new false
    alarm``, ``false alarm gone``), ``first_alert_ts`` and ``first_row`` (the key's first
    alert, ``TABLE:LSN:SEQ:N`` for ``explain``: the run's, else the baseline's)."""
    on = ["table", *run.by]
    a = run.by_key.select(*on, pl.col("outcome").alias("run"), "first_alert_ts", "first_row")
    b = baseline.by_key.select(
        *on, pl.col("outcome").alias("baseline"), "first_alert_ts", "first_row"
    )
    both = set(run.tables) & set(baseline.tables)
    a, b = (x.filter(pl.col("table").is_in(sorted(both))) for x in (a, b))
    for f in run.by:  # one type on both sides, as the diff by key compares them
        if a.schema[f] != b.schema[f]:
            a, b = (x.with_columns(pl.col(f).cast(pl.String)) for x in (a, b))
    joined = a.join(b, on=on, how="full", coalesce=True, nulls_equal=True, suffix="_baseline")
    change = pl.lit(None, pl.String)
    for (before, after), word in CHANGES.items():
        was = pl.col("baseline").is_null() if before is None else pl.col("baseline") == before
        now = pl.col("run").is_null() if after is None else pl.col("run") == after
        change = pl.when(was & now).then(pl.lit(word)).otherwise(change)
    return (
        joined.with_columns(
            change.alias("change"),
            pl.coalesce("first_alert_ts", "first_alert_ts_baseline").alias("first_alert_ts"),
            pl.coalesce("first_row", "first_row_baseline").alias("first_row"),
        )
        .filter(pl.col("change").is_not_null())
        .select(*on, "baseline", "run", "change", "first_alert_ts", "first_row")
        .sort("table", "change", "first_alert_ts", nulls_last=True)
    )


def pareto_front(precision: Sequence[float | None], recall: Sequence[float | None]) -> list[bool]:
    """For each point (precision, recall), whether no other point is at least as good on both
    and better on one (the Pareto front, where higher is better). A point missing either
    value is never on the front; equal points are on it together."""
    p = np.array([np.nan if v is None else v for v in precision], dtype=float)
    r = np.array([np.nan if v is None else v for v in recall], dtype=float)
    ok = ~(np.isnan(p) | np.isnan(r))
    p, r = np.where(ok, p, -np.inf), np.where(ok, r, -np.inf)
    at_least = (p[None, :] >= p[:, None]) & (r[None, :] >= r[:, None])
    better = (p[None, :] > p[:, None]) | (r[None, :] > r[:, None])
    dominated = (at_least & better & ok[None, :]).any(axis=1)
    return [bool(x) for x in (ok & ~dominated)]


def score_sweep(sweep: Any, labels: Any, by: str | Sequence[str], **options: Any) -> pl.DataFrame:
    """Every variant of a :class:`~restream_kit.iterate.sweeps.Sweep` scored: one row per
    variant and table, with ``variant`` (its label), its parameters, ``table``, ``tp``,
    ``fp``, ``fn``, ``precision``, ``recall``, ``f1``, ``alerts``, ``delay_p50_ms`` and
    ``pareto`` (on the precision-recall Pareto front of that table's variants). ``options``
    are :func:`score`'s."""
    fields = parse_by(by)
    read_options = {k: options.pop(k) for k in ("ts", "class_column", "positive") if k in options}
    read = read_labels(labels, fields, **read_options)
    rows = []
    for v in sweep.variants:
        s = score(v.result, read, fields, name=v.label, **options)
        for t in s.tables.values():
            d = t.to_dict()
            keep = ("tp", "fp", "fn", "precision", "recall", "f1", "alerts", "delay_p50_ms")
            rows.append(
                {"variant": v.label, **v.params, "table": t.table, **{k: d[k] for k in keep}}
            )
    frame = pl.DataFrame(rows, infer_schema_length=None)
    front = pl.Series("pareto", [False] * frame.height)
    for _table, part in frame.with_row_index("_i").group_by("table"):
        mask = pareto_front(part["precision"].to_list(), part["recall"].to_list())
        front = front.scatter(part["_i"], pl.Series(mask))
    return frame.with_columns(front)


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def format_duration(ms: float | None) -> str:
    """``ms`` in words: ``12.5 min``, ``1.2 h``, ``0 ms`` (``-`` for None)."""
    if ms is None:
        return "-"
    for unit, size in (("d", DAY_MS), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if abs(ms) >= size:
            return f"{ms / size:.1f} {unit}"
    return f"{ms:.0f} ms"


def _jsonable(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: v if isinstance(v, (int, float, str, bool, type(None))) else str(v)
        for k, v in row.items()
    }
