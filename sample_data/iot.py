"""Temperature sensors reporting in Celsius, with faulty spikes, outages and one overheating room.

One stream, ``readings.parquet``, of kind ``reading``: ``ts``, ``sensor``, ``room`` and
``celsius``. Each sensor reports about every 30 seconds (times are whole seconds, so readings
of different sensors often share a time, and window edges are hit exactly). A room's
temperature follows a daily cycle around its own level, and each sensor adds a little noise.

Besides that:

- spikes: now and then a sensor reports a value 30 to 45 degrees off, once (a fault);
- outages: sensors go silent for 10 to 60 minutes now and then;
- an incident: one room heats up by about 18 degrees over ten minutes, stays hot for half an
  hour and cools down again, a few hours into the log.

Times are milliseconds from 2026-01-01T00:00:00Z; one seed always gives the same table::

    python -m sample_data.iot --hours 24 --out sample_data/generated/iot_24h
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from .social import START_MS

__all__ = ["generate", "write", "main", "SCHEMA", "START_MS", "PERIOD_MS"]

#: Time between two readings of a sensor, on average.
PERIOD_MS = 30_000
HOUR_MS = 3_600_000

SCHEMA = pa.schema(
    [
        ("ts", pa.int64()),
        ("kind", pa.string()),
        ("sensor", pa.string()),
        ("room", pa.string()),
        ("celsius", pa.float64()),
    ]
)


def generate(
    hours: float = 6,
    *,
    sensors: int = 40,
    rooms: int = 8,
    spike_share: float = 0.003,
    seed: int = 0,
) -> pa.Table:
    """``hours`` of readings from ``sensors`` sensors in ``rooms`` rooms (module docstring)."""
    if hours <= 0 or sensors < 1 or rooms < 1 or not 0 <= spike_share < 1:
        raise ValueError("hours, sensors and rooms must be positive, spike_share in [0, 1)")
    rng = np.random.default_rng(seed)
    span = int(hours * HOUR_MS)
    per_sensor = span // PERIOD_MS + 1
    room_of = np.arange(sensors) % rooms
    level = 19.0 + 5.0 * rng.random(rooms)

    # Times: each sensor starts at a random second and reports every 28 to 32 seconds.
    gaps = rng.integers(28, 33, (sensors, per_sensor)) * 1_000
    gaps[:, 0] = rng.integers(0, PERIOD_MS // 1_000, sensors) * 1_000
    ts = np.cumsum(gaps, axis=1)
    keep = ts < span

    # Outages: about one per sensor every eight hours, 10 to 60 minutes long.
    for s in range(sensors):
        row = ts[s]
        for _ in range(rng.poisson(hours / 8)):
            t0 = rng.integers(0, span)
            t1 = t0 + rng.integers(10, 61) * 60_000
            keep[s, np.searchsorted(row, t0) : np.searchsorted(row, t1)] = False
    sensor = np.repeat(np.arange(sensors), per_sensor)[keep.ravel()]
    ts = ts.ravel()[keep.ravel()]
    room = room_of[sensor]

    # Temperature: the room's level, a daily cycle (warmest at 15:00 UTC), noise.
    day = 2 * np.pi * (ts / (24 * HOUR_MS) - 15 / 24)
    celsius = level[room] + 2.5 * np.cos(day) + rng.normal(0, 0.3, len(ts))

    # The incident: one room, some hours in (or halfway through a short log).
    hot_room = rng.integers(0, rooms)
    t0 = min(3 * HOUR_MS, span // 2)
    ramp = np.clip((ts - t0) / 600_000, 0, 1) * np.clip((t0 + 3_000_000 - ts) / 600_000, 0, 1)
    celsius += np.where(room == hot_room, 18.0 * ramp, 0.0)

    # Spikes: a single reading far off.
    spike = rng.random(len(ts)) < spike_share
    celsius += np.where(spike, rng.choice([-1.0, 1.0], len(ts)) * rng.uniform(30, 45, len(ts)), 0)

    order = np.argsort(ts, kind="stable")
    return pa.table(
        [
            pa.array(START_MS + ts[order], pa.int64()),
            pa.array(["reading"] * len(ts)),
            _names("sensor", sensors, sensor[order]),
            _names("room", rooms, room[order]),
            pa.array(np.round(celsius[order], 2), pa.float64()),
        ],
        schema=SCHEMA,
    )


def _names(prefix: str, count: int, index: np.ndarray) -> pa.Array:
    width = len(str(count - 1))
    return pa.array(np.array([f"{prefix}-{i:0{width}d}" for i in range(count)])[index])


def write(table: pa.Table, directory: str | Path) -> Path:
    """Write ``readings.parquet`` into ``directory``."""
    from .social import write as write_one

    return write_one(table, Path(directory) / "readings.parquet")


def main(argv: list[str] | None = None) -> int:
    """``python -m sample_data.iot --out DIR [--hours H] [--sensors N] [--seed S]``."""
    parser = argparse.ArgumentParser(
        prog="python -m sample_data.iot",
        description="Write synthetic temperature readings (Celsius) as Parquet.",
    )
    parser.add_argument("--out", required=True, help="directory for readings.parquet")
    parser.add_argument("--hours", type=float, default=6, help="length of the log (6)")
    parser.add_argument("--sensors", type=int, default=40, help="number of sensors (40)")
    parser.add_argument("--rooms", type=int, default=8, help="number of rooms (8)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        table = generate(args.hours, sensors=args.sensors, rooms=args.rooms, seed=args.seed)
    except ValueError as exc:
        parser.error(str(exc))
    path = write(table, args.out)
    print(f"wrote {path}: {table.num_rows:,} readings in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
