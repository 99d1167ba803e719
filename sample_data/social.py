"""A synthetic social-network event log like the one in the ReStream paper's evaluation.

Two kinds of events share one table, ordered by time:

- ``friendship``: ``src`` and ``dst`` become friends (``ip`` and ``has_email`` are null);
- ``message``: ``src`` sends a message to ``dst`` from ``ip``, with or without an email
  address in the text (``has_email``).

How active a user is follows a power law over users: the user of activity rank ``r`` (1 is
the most active) sends a share of the messages, and makes a share of the friendships,
proportional to ``r ** -alpha``. Most people write to their friends from one of a few IP
addresses of their own and rarely put an email address in a message; a few spammers write
mostly to strangers, from a small pool of IPs they share, with email addresses in most
messages. That is what ``examples/antispam.py`` looks for, so it flags some senders and not
most (a light user who has no friends yet and once sent an email address is flagged too).

Timestamps are milliseconds since the epoch from 2026-01-01T00:00:00Z on, non-decreasing, with
a daily rhythm (busy afternoons, quiet nights) and 260 ms between events on average: a million
events span three days, ten million about a month. Now and then two events share a millisecond.

Everything is drawn from one seeded generator, so a seed always gives the same table::

    python -m sample_data.social --events 1000000 --out sample_data/generated/social_1m.parquet
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = [
    "generate",
    "spammers",
    "write",
    "default_users",
    "default_path",
    "main",
    "SCHEMA",
    "START_MS",
    "MEAN_GAP_MS",
]

#: 2026-01-01T00:00:00Z in milliseconds since the epoch: when the log starts.
START_MS = 1_767_225_600_000
#: Average time between two consecutive events, in milliseconds.
MEAN_GAP_MS = 260.0
DAY_MS = 86_400_000
#: The event rate over a day is ``1 + DAILY_SWING * sin(...)`` times the average, highest at
#: ``PEAK_HOUR`` (UTC) and lowest twelve hours later.
DAILY_SWING = 0.6
PEAK_HOUR = 16

#: Chance that a message goes to a friend (if the sender has made one yet): normal, spammer.
TO_FRIEND = (0.85, 0.10)
#: Chance that a message contains an email address: normal sender, spammer.
WITH_EMAIL = (0.04, 0.60)
#: How often a user sends from each of their three IPs.
IP_SLOT_SHARES = (0.75, 0.20, 0.05)
#: The most active users are never spammers (they are the well-known accounts).
HEAD_WITHOUT_SPAMMERS = 5
#: IPs are numbered into 10.0.0.0/8.
MAX_IPS = 1 << 24
#: An odd multiplier, so that ``i * SCATTER mod 2**24`` spreads IP numbers over the network.
SCATTER = 2_654_435_761

SCHEMA = pa.schema(
    [
        ("ts", pa.int64()),
        ("kind", pa.string()),
        ("src", pa.int64()),
        ("dst", pa.int64()),
        ("ip", pa.string()),
        ("has_email", pa.bool_()),
    ]
)


def default_users(events: int) -> int:
    """The number of users when none is given: one per 50 events, at least 100."""
    return max(100, events // 50)


def default_path(events: int, directory: str | Path = "sample_data/generated") -> Path:
    """Where a log of ``events`` events goes: ``social_1m.parquet``, ``social_20000.parquet``..."""
    if events and events % 1_000_000 == 0:
        return Path(directory) / f"social_{events // 1_000_000}m.parquet"
    return Path(directory) / f"social_{events}.parquet"


def generate(
    events: int,
    *,
    alpha: float = 1.5,
    users: int | None = None,
    seed: int = 0,
    friendship_share: float = 0.10,
    spammer_share: float = 0.03,
) -> pa.Table:
    """Generate a log of ``events`` events (see the module docstring) as an Arrow table.

    ``alpha`` is the power-law exponent of user activity (any positive value; 1.1 to 2.0 are
    the usual range), ``users`` the number of users (ids 1 to ``users``; one per 50 events by
    default), ``friendship_share`` the expected fraction of friendship events and
    ``spammer_share`` the fraction of users, outside the few most active, who spam.
    """
    users = default_users(events) if users is None else users
    _check(events, alpha, users, friendship_share, spammer_share)
    rng = np.random.default_rng(seed)
    # Only uniform doubles are drawn (numpy keeps that stream stable); the rest is arithmetic.
    uniform = rng.random

    def below(n: int, size: int | tuple[int, ...]) -> np.ndarray:
        return np.minimum((uniform(size) * n).astype(np.int64), n - 1)

    rank_user, is_spammer = _draw_users(uniform, users, spammer_share)
    cdf = np.cumsum(np.arange(1, users + 1, dtype=np.float64) ** -alpha)
    cdf /= cdf[-1]

    # Each user's three IPs: a normal user's from a large pool (now and then shared with a
    # neighbour), a spammer's from a small pool that spammers share.
    normal_pool = 2 * users
    spam_pool = max(4, int(is_spammer.sum()) // 3)
    own_ips = below(normal_pool, (users + 1, 3))
    spam_ips = normal_pool + below(spam_pool, (users + 1, 3))
    user_ips = np.where(is_spammer[:, None], spam_ips, own_ips)

    # Events: when, which kind, who; a friendship's dst and a stranger are anyone else.
    ts = _timestamps(uniform(events))
    is_message = uniform(events) >= friendship_share
    rank = np.minimum(np.searchsorted(cdf, uniform(events), side="right"), users - 1)
    src = rank_user[rank]
    other = below(users - 1, events) + 1
    other += other >= src
    spammer = is_spammer[src]

    # A message meant for a friend goes to one of its sender's earlier friendships, if any.
    wants_friend = uniform(events) < np.where(spammer, TO_FRIEND[1], TO_FRIEND[0])
    friend = _earlier_friend(src, other, is_message, uniform(events))
    dst = np.where(is_message & wants_friend & (friend > 0), friend, other)

    slot = np.searchsorted(np.cumsum(IP_SLOT_SHARES), uniform(events) * sum(IP_SLOT_SHARES))
    ip = user_ips[src, np.minimum(slot, 2)]
    has_email = uniform(events) < np.where(spammer, WITH_EMAIL[1], WITH_EMAIL[0])

    friendship = ~is_message
    return pa.table(
        [
            pa.array(ts, pa.int64()),
            _decode(pa.array(is_message.astype(np.int8)), ["friendship", "message"]),
            pa.array(src, pa.int64()),
            pa.array(dst, pa.int64()),
            _decode(
                pa.array(ip.astype(np.int32), mask=friendship), _ip_names(normal_pool + spam_pool)
            ),
            pa.array(has_email, pa.bool_(), mask=friendship),
        ],
        schema=SCHEMA,
    )


def _draw_users(uniform, users: int, spammer_share: float) -> tuple[np.ndarray, np.ndarray]:
    """The first draws of a log: a random id for every activity rank, and which user ids
    (indexes of the boolean array; 0 is nobody) are spammers, drawn outside the head."""
    rank_user = np.argsort(uniform(users), kind="stable").astype(np.int64) + 1
    spam_by_rank = uniform(users) < spammer_share
    spam_by_rank[:HEAD_WITHOUT_SPAMMERS] = False
    is_spammer = np.zeros(users + 1, dtype=bool)
    is_spammer[rank_user] = spam_by_rank
    return rank_user, is_spammer


def spammers(
    events: int, *, users: int | None = None, seed: int = 0, spammer_share: float = 0.03
) -> np.ndarray:
    """The ids of the users ``generate`` (with the same arguments) makes spammers, sorted:
    the ground truth behind the log, drawn the same way without generating its events."""
    users = default_users(events) if users is None else users
    _rank_user, is_spammer = _draw_users(np.random.default_rng(seed).random, users, spammer_share)
    return np.flatnonzero(is_spammer)


def write(table: pa.Table, path: str | Path) -> Path:
    """Write ``table`` as Parquet (zstd) at ``path``, atomically, creating its directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _check(
    events: int, alpha: float, users: int, friendship_share: float, spammer_share: float
) -> None:
    if events < 0:
        raise ValueError(f"events must be zero or more, not {events}")
    if not alpha > 0:
        raise ValueError(f"alpha must be positive, not {alpha}")
    if users < 2:
        raise ValueError(f"users must be at least 2 (someone to write to), not {users}")
    if 2 * users + users // 3 + 4 > MAX_IPS:
        raise ValueError(
            f"users must be at most {(MAX_IPS - 4) * 3 // 7:,} (the IPs fit in 10.0.0.0/8)"
        )
    for name, share in (("friendship_share", friendship_share), ("spammer_share", spammer_share)):
        if not 0 <= share < 1:
            raise ValueError(f"{name} must be in [0, 1), not {share}")


def _timestamps(u: np.ndarray) -> np.ndarray:
    """Event times: a Poisson process whose rate follows the day, from ``START_MS`` on.

    Arrivals are spaced evenly in "busy time" (exponential gaps of ``MEAN_GAP_MS``), then
    mapped to clock time through the inverse of the cumulative rate, so that busy hours get
    more events. Flooring to whole milliseconds keeps the times non-decreasing.
    """
    busy = np.cumsum(-MEAN_GAP_MS * np.log1p(-u))
    end = (busy[-1] if len(busy) else 0.0) + DAY_MS
    clock = np.arange(0.0, end + 60_000.0, 60_000.0)  # a grid of minutes
    omega = 2 * np.pi / DAY_MS
    phase = omega * PEAK_HOUR * 3_600_000 - np.pi / 2
    # The integral of 1 + swing * sin(omega * t - phase) from 0 to t.
    cumulative = clock + DAILY_SWING / omega * (np.cos(phase) - np.cos(omega * clock - phase))
    return START_MS + np.floor(np.interp(busy, cumulative, clock)).astype(np.int64)


def _earlier_friend(
    src: np.ndarray, other: np.ndarray, is_message: np.ndarray, u: np.ndarray
) -> np.ndarray:
    """For every event, a random friend its ``src`` made in an earlier row (0 when none).

    Friendship rows pair ``src`` with ``other``, both ways. Sorted by (user, row), a user's
    friendships made before row ``i`` are the ones between keys ``user * n`` and
    ``user * n + i``; ``u`` picks one of them.
    """
    n = len(src)
    rows = np.flatnonzero(~is_message)
    user = np.concatenate([src[rows], other[rows]])
    partner = np.concatenate([other[rows], src[rows]])
    keys = user * n + np.concatenate([rows, rows])
    order = np.argsort(keys, kind="stable")
    keys, partner = keys[order], partner[order]
    first = np.searchsorted(keys, src * n)
    made = np.searchsorted(keys, src * n + np.arange(n)) - first
    pick = first + (u * made).astype(np.int64)
    found = made > 0
    friend = np.zeros(n, dtype=np.int64)
    friend[found] = partner[pick[found]]
    return friend


def _decode(indices: pa.Array, names: list[str] | pa.Array) -> pa.Array:
    """Strings ``names[i]`` for every index ``i`` (nulls stay null)."""
    dictionary = names if isinstance(names, pa.Array) else pa.array(names, pa.string())
    return pa.DictionaryArray.from_arrays(indices, dictionary).cast(pa.string())


def _ip_names(count: int) -> pa.Array:
    """``count`` distinct addresses in 10.0.0.0/8, such as ``"10.183.4.77"``."""
    number = (np.arange(count, dtype=np.int64) * SCATTER) % MAX_IPS
    octets = [pc.cast(pa.array((number >> shift) & 255), pa.string()) for shift in (16, 8, 0)]
    return pc.binary_join_element_wise("10", *octets, ".")


def main(argv: list[str] | None = None) -> int:
    """``python -m sample_data.social --events N --out PATH [--alpha A] [--users U] [--seed S]``."""
    parser = argparse.ArgumentParser(
        prog="python -m sample_data.social",
        description="Write a synthetic social-network event log (friendships and messages) as Parquet.",
    )
    parser.add_argument("--events", type=int, required=True, help="number of events")
    parser.add_argument("--out", required=True, help="Parquet file to write")
    parser.add_argument(
        "--alpha", type=float, default=1.5, help="power-law exponent of activity (1.5)"
    )
    parser.add_argument("--users", type=int, default=None, help="number of users (events / 50)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    parser.add_argument(
        "--friendship-share", type=float, default=0.10, help="share of friendships (0.1)"
    )
    parser.add_argument(
        "--spammer-share", type=float, default=0.03, help="share of spammers (0.03)"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        table = generate(
            args.events,
            alpha=args.alpha,
            users=args.users,
            seed=args.seed,
            friendship_share=args.friendship_share,
            spammer_share=args.spammer_share,
        )
    except ValueError as exc:
        parser.error(str(exc))
    path = write(table, args.out)
    elapsed = time.perf_counter() - started
    ts = table.column("ts")
    span_days = (ts[-1].as_py() - ts[0].as_py()) / DAY_MS if len(ts) else 0.0
    messages = pc.sum(pc.equal(table.column("kind"), "message")).as_py() or 0
    print(
        f"wrote {path}: {table.num_rows:,} events ({messages:,} messages, "
        f"{table.num_rows - messages:,} friendships) over {span_days:.1f} days, "
        f"{path.stat().st_size / 1e6:.1f} MB in {elapsed:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
