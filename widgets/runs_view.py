"""``%restream runs``: the run catalog as a compact table, one row per run, newest first.

The catalog's full frame (``Workbench().catalog.runs()``, 20-odd columns: sizes, program and
log fingerprints, parameters) is for queries; a cell shows what a glance needs: the cell's
name, where it ran, how many events, how long, when, whether it worked and its size on disk. The serial
replays that served as a cell's baseline in this session are marked ``baseline``.
"""

from __future__ import annotations

from typing import Any

import polars as pl

__all__ = ["runs_table"]


def runs_table(catalog: Any, baselines: set[str] = frozenset()) -> pl.DataFrame:
    """Name, engine, events, time, when, status and role of every run in ``catalog``;
    ``baselines`` are the run ids recorded as baselines (their role says so)."""
    runs = catalog.runs()
    if runs.is_empty():
        return pl.DataFrame(
            schema={c: pl.String for c in ("name", "engine", "events", "time", "when", "status")}
        )
    return runs.select(
        "name",
        "engine",
        pl.col("events"),
        pl.col("wall_s").map_elements(_seconds, return_dtype=pl.String).alias("time"),
        pl.col("started_at").dt.strftime("%Y-%m-%d %H:%M:%S UTC").alias("when"),
        "status",
        "size",
        pl.when(pl.col("run_id").is_in(list(baselines)))
        .then(pl.lit("baseline"))
        .otherwise(pl.lit("cell"))
        .alias("role"),
        pl.col("run_id").str.slice(0, 8).alias("run"),
    )


def _seconds(wall_s: float | None) -> str:
    if wall_s is None:
        return ""
    return f"{wall_s:.2f} s" if wall_s < 60 else f"{wall_s / 60:.1f} min"
