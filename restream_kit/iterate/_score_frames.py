"""The polars computations behind :func:`restream_kit.iterate.score.score`.

Everything here is a join or a group-by over whole columns: an output table's alerts against
the positive keys of the labels. Key level, as a fraud team's review counts cases: a key with
at least one alert is alerted; alerted and labelled is a true positive, alerted and not
labelled a false positive, labelled and never alerted a false negative.
"""

from __future__ import annotations

import polars as pl

from ._labels import LABEL_TS

__all__ = ["OUTCOMES", "align_keys", "key_outcomes", "counts", "buckets", "BUCKET_COLUMNS"]

#: The outcome of a key: alerted and labelled, alerted only, labelled only.
OUTCOMES = ("tp", "fp", "fn")
#: The columns of a table's time buckets, in order (after ``table``).
BUCKET_COLUMNS = {
    "bucket_ts": pl.Int64,
    "alerts": pl.Int64,
    "first_alerted": pl.Int64,
    "tp": pl.Int64,
    "fp": pl.Int64,
    "precision": pl.Float64,
    "positives": pl.Int64,
    "caught": pl.Int64,
    "recall": pl.Float64,
}


def align_keys(
    alerts: pl.DataFrame, labels: pl.DataFrame, by: tuple[str, ...]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Both frames with each ``by`` field of one type: as text where they differ (1 vs "1")."""
    for f in by:
        if alerts.schema[f] != labels.schema[f]:
            if alerts.schema[f] == pl.Null:
                alerts = alerts.with_columns(pl.col(f).cast(labels.schema[f]))
            elif labels.height == 0 or labels.schema[f] == pl.Null:
                labels = labels.with_columns(pl.col(f).cast(alerts.schema[f]))
            else:
                alerts = alerts.with_columns(pl.col(f).cast(pl.String))
                labels = labels.with_columns(pl.col(f).cast(pl.String))
    return alerts, labels


def key_outcomes(
    alerts: pl.DataFrame,
    labels: pl.DataFrame,
    by: tuple[str, ...],
    window_ms: int | None,
    table: str = "",
) -> pl.DataFrame:
    """One row per key alerted or labelled: the ``by`` fields, ``label_ts``,
    ``first_alert_ts``, ``alerts`` (its rows), ``outcome`` (tp, fp, fn), ``delay_ms`` (first
    alert minus label time, for a true positive with a label time), ``early`` (that delay is
    negative), ``timely`` (alerted no later than ``window_ms`` after the label time, or
    early; null without a window or a label time) and ``first_row`` (the key's first alert as
    ``TABLE:LSN:SEQ:N``, the row ``explain`` takes; null when ``alerts`` has no ``lsn``)."""
    alerts, labels = align_keys(alerts, labels, by)
    first_row = pl.lit(None, pl.String)
    if "lsn" in alerts.columns and "seq" in alerts.columns:
        # N: the row's rank among its event's rows in the table, as the diff counts it.
        alerts = alerts.with_columns(pl.int_range(pl.len()).over("lsn", "seq").alias("_n"))
        ref = pl.format(f"{table}:{{}}:{{}}:{{}}", "lsn", "seq", "_n")
        first_row = ref.sort_by("ts", "lsn", "seq", "_n").first()
    keys = alerts.group_by(list(by)).agg(
        pl.col("ts").min().alias("first_alert_ts"),
        pl.len().cast(pl.Int64).alias("alerts"),
        first_row.alias("first_row"),
    )
    joined = keys.join(
        labels.with_columns(pl.lit(True).alias("_labelled")),
        on=list(by),
        how="full",
        coalesce=True,
        nulls_equal=True,
    )
    alerted = pl.col("first_alert_ts").is_not_null()
    labelled = pl.col("_labelled").fill_null(False)
    outcome = (
        pl.when(alerted & labelled)
        .then(pl.lit("tp"))
        .when(alerted)
        .then(pl.lit("fp"))
        .otherwise(pl.lit("fn"))
    )
    delay = pl.when(alerted & labelled).then(pl.col("first_alert_ts") - pl.col(LABEL_TS))
    timely = (
        (pl.col("delay_ms") <= window_ms) if window_ms is not None else pl.lit(None, pl.Boolean)
    )
    return (
        joined.with_columns(
            outcome.alias("outcome"),
            delay.alias("delay_ms"),
            pl.col("alerts").fill_null(0),
        )
        .with_columns((pl.col("delay_ms") < 0).alias("early"), timely.alias("timely"))
        .select(
            *by,
            LABEL_TS,
            "first_alert_ts",
            "alerts",
            "outcome",
            "delay_ms",
            "early",
            "timely",
            "first_row",
        )
        .sort("first_alert_ts", LABEL_TS, nulls_last=True)
    )


def counts(by_key: pl.DataFrame, alerts: int, windowed: bool) -> dict[str, int | float | None]:
    """Per table: tp, fp, fn, early, timely and late (when ``windowed``, else None), alerts
    on positives, and the delay's median and 90th percentile (linear interpolation, over
    true positives not early)."""
    tp = pl.col("outcome") == "tp"
    on_time = tp & (pl.col("delay_ms") >= 0)
    row = by_key.select(
        tp.sum().alias("tp"),
        (pl.col("outcome") == "fp").sum().alias("fp"),
        (pl.col("outcome") == "fn").sum().alias("fn"),
        (tp & pl.col("early")).sum().alias("early"),
        (tp & pl.col("timely")).sum().alias("timely"),
        (tp & pl.col("timely").not_()).sum().alias("late"),
        pl.col("alerts").filter(tp).sum().alias("alerts_on_positives"),
        pl.col("delay_ms").filter(on_time).quantile(0.5, "linear").alias("delay_p50_ms"),
        pl.col("delay_ms").filter(on_time).quantile(0.9, "linear").alias("delay_p90_ms"),
    ).row(0, named=True)
    out: dict[str, int | float | None] = {
        k: int(v or 0) for k, v in row.items() if not k.startswith(("delay", "_"))
    }
    if not windowed:
        out["timely"] = out["late"] = None
    out["delay_p50_ms"] = row["delay_p50_ms"]
    out["delay_p90_ms"] = row["delay_p90_ms"]
    out["alerts"] = alerts
    return out


def buckets(alerts: pl.DataFrame, by_key: pl.DataFrame, bucket_ms: int) -> pl.DataFrame:
    """Per time bucket (``bucket_ts``, its start: ms since the epoch, a multiple of
    ``bucket_ms``): ``alerts`` (rows in the bucket); ``first_alerted`` keys, of which ``tp``
    and ``fp``, and their ``precision``; ``positives`` labelled in the bucket, of which
    ``caught`` (alerted at any time), and their ``recall``."""

    def start(col: str) -> pl.Expr:
        return (pl.col(col) - pl.col(col).mod(bucket_ms)).alias("bucket_ts")

    rows = alerts.group_by(start("ts")).agg(pl.len().cast(pl.Int64).alias("alerts"))
    first = (
        by_key.filter(pl.col("first_alert_ts").is_not_null())
        .group_by(start("first_alert_ts"))
        .agg(
            pl.len().cast(pl.Int64).alias("first_alerted"),
            (pl.col("outcome") == "tp").sum().cast(pl.Int64).alias("tp"),
            (pl.col("outcome") == "fp").sum().cast(pl.Int64).alias("fp"),
        )
    )
    labelled = (
        by_key.filter(pl.col(LABEL_TS).is_not_null() & (pl.col("outcome") != "fp"))
        .group_by(start(LABEL_TS))
        .agg(
            pl.len().cast(pl.Int64).alias("positives"),
            (pl.col("outcome") == "tp").sum().cast(pl.Int64).alias("caught"),
        )
    )
    out = rows.join(first, on="bucket_ts", how="full", coalesce=True).join(
        labelled, on="bucket_ts", how="full", coalesce=True
    )
    zero = ["alerts", "first_alerted", "tp", "fp", "positives", "caught"]
    out = out.with_columns(pl.col(zero).fill_null(0)).with_columns(
        _ratio("tp", "first_alerted").alias("precision"),
        _ratio("caught", "positives").alias("recall"),
    )
    return out.select(list(BUCKET_COLUMNS)).cast(BUCKET_COLUMNS).sort("bucket_ts")


def _ratio(num: str, den: str) -> pl.Expr:
    return pl.when(pl.col(den) > 0).then(pl.col(num) / pl.col(den))
