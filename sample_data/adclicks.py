"""Ad impressions and clicks, with two kinds of click fraud, as two Parquet streams.

- ``impressions``: an ad was shown (``ts``, ``impression_id``, ``publisher``, ``ad``, ``ip``).
- ``clicks``: someone clicked (``ts``, ``impression_id``, ``publisher``, ``ip``, ``label``).
  ``label`` says where the click came from, for judging a rule afterwards; a rule should not
  read it: ``organic``, ``bot`` or ``spam``.

Organic traffic: impressions arrive at a steady rate, from IPs and on publishers drawn with a
power law (a few big publishers, a long tail). About 2% of them are clicked, a few seconds to
a minute later (log-normal, never under 300 ms), from the IP that saw the ad.

Fraud:

- ``bot``: a few IPs run click bots in bursts of a few minutes: they load a page of one
  publisher every second or two and click its ad 50 to 400 ms later.
- ``spam``: one small publisher buys clicks from a botnet of a few hundred IPs: in bursts,
  clicks arrive on that publisher with impression ids that were never served.

A click always comes after its impression (by at least 50 ms), so the join of the two
streams never depends on how the streams' ties are ordered. Times are milliseconds from
2026-01-01T00:00:00Z; one seed always gives the same tables::

    python -m sample_data.adclicks --minutes 60 --out sample_data/generated/adclicks_1h
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from .social import START_MS

__all__ = ["generate", "write", "main", "IMPRESSIONS", "CLICKS", "START_MS", "CTR"]

MINUTE_MS = 60_000
#: The share of organic impressions that are clicked.
CTR = 0.02

IMPRESSIONS = pa.schema(
    [
        ("ts", pa.int64()),
        ("impression_id", pa.int64()),
        ("publisher", pa.string()),
        ("ad", pa.string()),
        ("ip", pa.string()),
    ]
)
CLICKS = pa.schema(
    [
        ("ts", pa.int64()),
        ("impression_id", pa.int64()),
        ("publisher", pa.string()),
        ("ip", pa.string()),
        ("label", pa.string()),
    ]
)


def generate(
    minutes: float = 20,
    *,
    impressions_per_minute: float = 1_000,
    publishers: int = 20,
    ads: int = 50,
    ips: int = 20_000,
    bots: int = 3,
    botnet: int = 300,
    seed: int = 0,
) -> tuple[pa.Table, pa.Table]:
    """The ``impressions`` and ``clicks`` tables of ``minutes`` minutes (module docstring)."""
    if minutes <= 0 or impressions_per_minute <= 0 or publishers < 2 or ads < 1 or ips < 10:
        raise ValueError("minutes, rates and counts must be positive (at least 2 publishers)")
    rng = np.random.default_rng(seed)
    span = int(minutes * MINUTE_MS)

    # Organic impressions and their clicks.
    n = max(1, int(impressions_per_minute * minutes))
    imp_ts = np.sort(rng.integers(0, span, n))
    imp_pub = _power(rng, publishers, n, 1.1)
    imp_ad = rng.integers(0, ads, n)
    imp_ip = _power(rng, ips, n, 0.8)
    clicked = np.flatnonzero(rng.random(n) < CTR)
    delay = np.maximum(300, rng.lognormal(np.log(8_000), 1.0, len(clicked))).astype(np.int64)
    click_parts = [(imp_ts[clicked] + delay, clicked, np.zeros(len(clicked), np.int8))]

    # Click bots: bursts of a few minutes, an impression every 1-2 s, clicked 50-400 ms later.
    bot_ips = ips + np.arange(bots)  # addresses of their own
    extra_ts, extra_pub, extra_ip = [], [], []
    for bot in bot_ips:
        for _ in range(max(1, int(minutes // 20))):
            t0 = rng.integers(0, max(1, span - 4 * MINUTE_MS))
            length = rng.integers(2 * MINUTE_MS, 4 * MINUTE_MS)
            times = t0 + np.cumsum(rng.integers(1_000, 2_000, length // 1_500))
            times = times[times < span]
            extra_ts.append(times)
            extra_pub.append(np.full(len(times), rng.integers(0, publishers)))
            extra_ip.append(np.full(len(times), bot))
    bot_ts = np.concatenate(extra_ts)
    first_bot = n
    imp_ts = np.concatenate([imp_ts, bot_ts])
    imp_pub = np.concatenate([imp_pub, *extra_pub])
    imp_ad = np.concatenate([imp_ad, rng.integers(0, ads, len(bot_ts))])
    imp_ip = np.concatenate([imp_ip, *extra_ip])
    bot_rows = first_bot + np.arange(len(bot_ts))
    click_parts.append(
        (bot_ts + rng.integers(50, 400, len(bot_ts)), bot_rows, np.ones(len(bot_ts), np.int8))
    )

    # Impression ids in time order; clicks name the row they clicked.
    order = np.argsort(imp_ts, kind="stable")
    row_id = np.empty(len(order), np.int64)
    row_id[order] = np.arange(len(order))
    impression_id = 1_000_000 + row_id
    click_ts = np.concatenate([c[0] for c in click_parts])
    click_row = np.concatenate([c[1] for c in click_parts])
    click_label = np.concatenate([c[2] for c in click_parts])
    click_id = impression_id[click_row]
    click_pub = imp_pub[click_row]
    click_ip = imp_ip[click_row]

    # Click spam: bursts of clicks on one small publisher from a botnet, with ids never served.
    spammer = publishers - 1
    spam_ts = []
    for _ in range(max(1, int(minutes // 15))):
        t0 = rng.integers(0, max(1, span - 5 * MINUTE_MS))
        spam_ts.append(t0 + np.sort(rng.integers(0, 5 * MINUTE_MS, rng.integers(150, 400))))
    spam_ts = np.concatenate(spam_ts)
    spam_ts = spam_ts[spam_ts < span]
    m = len(spam_ts)
    click_ts = np.concatenate([click_ts, spam_ts])
    click_id = np.concatenate([click_id, 900_000 - rng.integers(0, 900_000, m)])
    click_pub = np.concatenate([click_pub, np.full(m, spammer)])
    click_ip = np.concatenate([click_ip, ips + bots + rng.integers(0, botnet, m)])
    click_label = np.concatenate([click_label, np.full(m, 2, np.int8)])
    keep = click_ts < span
    corder = np.argsort(click_ts[keep], kind="stable")

    ip_names = _ip_names(ips + bots + botnet)
    impressions = pa.table(
        [
            pa.array(START_MS + imp_ts[order], pa.int64()),
            pa.array(impression_id[order], pa.int64()),
            _names("pub", publishers, imp_pub[order]),
            _names("ad", ads, imp_ad[order]),
            pa.array(ip_names[imp_ip[order]]),
        ],
        schema=IMPRESSIONS,
    )
    clicks = pa.table(
        [
            pa.array(START_MS + click_ts[keep][corder], pa.int64()),
            pa.array(click_id[keep][corder], pa.int64()),
            _names("pub", publishers, click_pub[keep][corder]),
            pa.array(ip_names[click_ip[keep][corder]]),
            pa.array(np.array(["organic", "bot", "spam"])[click_label[keep][corder]]),
        ],
        schema=CLICKS,
    )
    return impressions, clicks


def _power(rng: np.random.Generator, count: int, size: int, alpha: float) -> np.ndarray:
    """Indexes 0..count-1, index i drawn with weight proportional to (i + 1) ** -alpha."""
    weights = np.arange(1, count + 1, dtype=np.float64) ** -alpha
    cdf = np.cumsum(weights) / weights.sum()
    return np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), count - 1)


def _names(prefix: str, count: int, index: np.ndarray) -> pa.Array:
    width = len(str(count - 1))
    return pa.array(np.array([f"{prefix}-{i:0{width}d}" for i in range(count)])[index])


def _ip_names(count: int) -> np.ndarray:
    """``count`` distinct addresses in 100.64.0.0/10, scattered."""
    number = (np.arange(count, dtype=np.int64) * 2_654_435_761) % (1 << 22)
    return np.array([f"100.{64 + (x >> 16)}.{(x >> 8) & 255}.{x & 255}" for x in number.tolist()])


def write(tables: tuple[pa.Table, pa.Table], directory: str | Path) -> tuple[Path, Path]:
    """Write ``impressions.parquet`` and ``clicks.parquet`` into ``directory``."""
    from .social import write as write_one

    impressions, clicks = tables
    directory = Path(directory)
    return (
        write_one(impressions, directory / "impressions.parquet"),
        write_one(clicks, directory / "clicks.parquet"),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m sample_data.adclicks --out DIR [--minutes M] [--rate R] [--seed S]``."""
    parser = argparse.ArgumentParser(
        prog="python -m sample_data.adclicks",
        description="Write synthetic ad impressions and clicks, with click fraud, as Parquet.",
    )
    parser.add_argument("--out", required=True, help="directory for impressions/clicks.parquet")
    parser.add_argument("--minutes", type=float, default=20, help="length of the log (20)")
    parser.add_argument(
        "--rate", type=float, default=1_000, help="organic impressions per minute (1000)"
    )
    parser.add_argument("--publishers", type=int, default=20, help="number of publishers (20)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        tables = generate(
            args.minutes,
            impressions_per_minute=args.rate,
            publishers=args.publishers,
            seed=args.seed,
        )
    except ValueError as exc:
        parser.error(str(exc))
    paths = write(tables, args.out)
    print(
        f"wrote {paths[0]} ({tables[0].num_rows:,} impressions) and {paths[1]} "
        f"({tables[1].num_rows:,} clicks) in {time.perf_counter() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
