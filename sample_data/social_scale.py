"""A large social log written in chunks, for replays whose memory must not grow with the log.

The events are those of :mod:`sample_data.social` (friendships and messages, power-law
activity, spammers sharing a small pool of IPs), but drawn a chunk at a time from a fixed
population: ``users`` users (2M by default) with three IPs each, so that per-sender and per-IP
state stops growing once most users have been seen, however many events the log has. A message
meant for a friend goes to one of a few contacts fixed per user (the full generator's "an
earlier friendship" needs the whole log). No more than one chunk is ever in memory.

``--unordered`` writes each chunk's rows shuffled and swaps neighbouring chunks, as a log
gathered from several producers would be: it must then be put in time order before a replay
(the serial engine does it once, out of core; see ``docs/scale.md``)::

    python -m sample_data.social_scale --events 30000000 --users 2000000 \\
        --out sample_data/generated/social_scale_30m.parquet --unordered
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .social import (
    DAILY_SWING,
    DAY_MS,
    HEAD_WITHOUT_SPAMMERS,
    IP_SLOT_SHARES,
    MEAN_GAP_MS,
    PEAK_HOUR,
    SCHEMA,
    START_MS,
    TO_FRIEND,
    WITH_EMAIL,
    _decode,
    _ip_names,
)

__all__ = ["chunks", "write_scaled", "main", "CHUNK", "CONTACTS"]

#: Events per chunk: what the generator holds at a time.
CHUNK = 1_000_000
#: Contacts per user (the friends a message goes to).
CONTACTS = 8


class _Population:
    """The users, their activity ranks, spammers, IPs and contacts: fixed for the whole log."""

    def __init__(self, users: int, alpha: float, spammer_share: float, rng: np.random.Generator):
        self.users = users
        self.rank_user = np.argsort(rng.random(users), kind="stable").astype(np.int64) + 1
        spam_by_rank = rng.random(users) < spammer_share
        spam_by_rank[:HEAD_WITHOUT_SPAMMERS] = False
        self.is_spammer = np.zeros(users + 1, dtype=bool)
        self.is_spammer[self.rank_user] = spam_by_rank
        cdf = np.cumsum(np.arange(1, users + 1, dtype=np.float64) ** -alpha)
        self.cdf = cdf / cdf[-1]
        normal_pool = 2 * users
        spam_pool = max(4, int(self.is_spammer.sum()) // 3)
        own = _below(rng, normal_pool, (users + 1, 3))
        spam = normal_pool + _below(rng, spam_pool, (users + 1, 3))
        self.user_ips = np.where(self.is_spammer[:, None], spam, own).astype(np.int32)
        self.ip_names = _ip_names(normal_pool + spam_pool)
        self.contacts = _below(rng, users, (users + 1, CONTACTS)) + 1


def _below(rng: np.random.Generator, n: int, size) -> np.ndarray:
    return np.minimum((rng.random(size) * n).astype(np.int64), n - 1)


def _clock(busy: np.ndarray) -> np.ndarray:
    """Busy time (ms since the start) to clock time, following the day's rhythm (as in
    :func:`sample_data.social._timestamps`, over the minutes this chunk spans)."""
    omega = 2 * np.pi / DAY_MS
    phase = omega * PEAK_HOUR * 3_600_000 - np.pi / 2
    lo = max(0.0, (busy[0] // DAY_MS - 2) * DAY_MS)
    grid = np.arange(lo, busy[-1] + 2 * DAY_MS, 60_000.0)
    cumulative = grid + DAILY_SWING / omega * (np.cos(phase) - np.cos(omega * grid - phase))
    return START_MS + np.floor(np.interp(busy, cumulative, grid)).astype(np.int64)


def chunks(
    events: int,
    *,
    users: int = 2_000_000,
    alpha: float = 1.5,
    seed: int = 0,
    chunk: int = CHUNK,
    friendship_share: float = 0.10,
    spammer_share: float = 0.03,
) -> Iterator[pa.Table]:
    """The log's events in time order, ``chunk`` events per table."""
    if events < 0 or users < 2 or chunk < 1:
        raise ValueError("events must be >= 0, users >= 2 and chunk >= 1")
    rng = np.random.default_rng(seed)
    people = _Population(users, alpha, spammer_share, rng)
    busy_end = 0.0
    for start in range(0, events, chunk):
        n = min(chunk, events - start)
        busy = busy_end + np.cumsum(-MEAN_GAP_MS * np.log1p(-rng.random(n)))
        busy_end = float(busy[-1])
        ts = _clock(busy)
        is_message = rng.random(n) >= friendship_share
        rank = np.minimum(np.searchsorted(people.cdf, rng.random(n), side="right"), users - 1)
        src = people.rank_user[rank]
        other = _below(rng, users - 1, n) + 1
        other += other >= src
        spammer = people.is_spammer[src]
        to_friend = rng.random(n) < np.where(spammer, TO_FRIEND[1], TO_FRIEND[0])
        friend = people.contacts[src, _below(rng, CONTACTS, n)]
        dst = np.where(is_message & to_friend & (friend != src), friend, other)
        slot = np.searchsorted(np.cumsum(IP_SLOT_SHARES), rng.random(n) * sum(IP_SLOT_SHARES))
        ip = people.user_ips[src, np.minimum(slot, 2)]
        has_email = rng.random(n) < np.where(spammer, WITH_EMAIL[1], WITH_EMAIL[0])
        friendship = ~is_message
        yield pa.table(
            [
                pa.array(ts, pa.int64()),
                _decode(pa.array(is_message.astype(np.int8)), ["friendship", "message"]),
                pa.array(src, pa.int64()),
                pa.array(dst, pa.int64()),
                _decode(pa.array(ip, mask=friendship), people.ip_names),
                pa.array(has_email, pa.bool_(), mask=friendship),
            ],
            schema=SCHEMA,
        )


def _unordered(tables: Iterator[pa.Table], seed: int) -> Iterator[pa.Table]:
    """Each table's rows shuffled, and neighbouring tables swapped (one held back at a time)."""
    rng = np.random.default_rng(seed + 1)
    held = None
    for table in tables:
        table = table.take(pa.array(rng.permutation(table.num_rows)))
        if held is None:
            held = table
        else:
            yield table
            yield held
            held = None
    if held is not None:
        yield held


def write_scaled(path: str | Path, events: int, *, unordered: bool = False, **options) -> dict:
    """Write the log of :func:`chunks` at ``path`` (zstd Parquet), a chunk at a time."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tables = chunks(events, **options)
    if unordered:
        tables = _unordered(tables, options.get("seed", 0))
    stats = {"events": 0, "messages": 0, "first_ts": None, "last_ts": None}
    try:
        with pq.ParquetWriter(tmp, SCHEMA, compression="zstd") as writer:
            for table in tables:
                writer.write_table(table, row_group_size=1 << 20)
                ts = table.column("ts").to_numpy()
                stats["events"] += table.num_rows
                stats["messages"] += int(
                    np.count_nonzero(
                        table.column("kind").to_numpy(zero_copy_only=False) == "message"
                    )
                )
                lo, hi = int(ts.min()), int(ts.max())
                stats["first_ts"] = lo if stats["first_ts"] is None else min(stats["first_ts"], lo)
                stats["last_ts"] = hi if stats["last_ts"] is None else max(stats["last_ts"], hi)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return stats


def main(argv: list[str] | None = None) -> int:
    """``python -m sample_data.social_scale --events N --out PATH [--users U] [--unordered]``."""
    parser = argparse.ArgumentParser(
        prog="python -m sample_data.social_scale",
        description="Write a large social log a chunk at a time, with a bounded population.",
    )
    parser.add_argument("--events", type=int, required=True, help="number of events")
    parser.add_argument("--out", required=True, help="Parquet file to write")
    parser.add_argument("--users", type=int, default=2_000_000, help="number of users (2M)")
    parser.add_argument("--alpha", type=float, default=1.5, help="activity power law (1.5)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    parser.add_argument("--chunk", type=int, default=CHUNK, help="events per chunk (1M)")
    parser.add_argument(
        "--unordered", action="store_true", help="rows not in time order (shuffled chunks)"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        stats = write_scaled(
            args.out,
            args.events,
            unordered=args.unordered,
            users=args.users,
            alpha=args.alpha,
            seed=args.seed,
            chunk=args.chunk,
        )
    except ValueError as exc:
        parser.error(str(exc))
    span = (stats["last_ts"] - stats["first_ts"]) / DAY_MS if stats["events"] else 0.0
    size = Path(args.out).stat().st_size / 1e6
    print(
        f"wrote {args.out}: {stats['events']:,} events ({stats['messages']:,} messages) over "
        f"{span:.1f} days, {size:.1f} MB in {time.perf_counter() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
