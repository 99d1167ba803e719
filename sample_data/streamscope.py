"""Security alerts and the processes that raised them: the two streams of StreamScope's example.

StreamScope (Lin et al., NSDI 2016) joins a stream of alerts with a stream of process events to
learn which user each alert belongs to, then counts alerts per user in hopping windows. This
generator writes those two streams as two Parquet files:

- ``processes``: a process starts or ends on a host (``ts``, ``host``, ``pid``, ``user``,
  ``exe``, ``action`` = ``"start"`` or ``"end"``). Pids are unique per host. A process lives
  two minutes on average; the ones still running when the log ends have no ``end`` row.
- ``alerts``: a process raised an alert (``ts``, ``host``, ``pid``, ``rule``, ``severity``
  from 1 to 5). An alert always comes at least a millisecond after its process started and
  before it ended, so the join never depends on how ties between the streams are ordered.
  A few alerts name a pid below 1000 on their host: system processes started before the log,
  which have no ``start`` row and so no user.

Most processes raise an alert now and then. A few users are compromised for a few minutes
each: their processes raise alerts every second or so while it lasts, and that is what the
per-user windows of ``examples/streamscope.py`` show. Users are drawn with a power law, so
some users run many more processes than others. Times are milliseconds from
2026-01-01T00:00:00Z. One seed always gives the same two tables::

    python -m sample_data.streamscope --minutes 60 --out sample_data/generated/streamscope_1h
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

__all__ = [
    "generate",
    "write",
    "main",
    "PROCESSES",
    "ALERTS",
    "START_MS",
    "RULES",
    "EXES",
]

#: 2026-01-01T00:00:00Z in milliseconds since the epoch.
START_MS = 1_767_225_600_000
MINUTE_MS = 60_000
RULES = (
    "suspicious-child",
    "credential-read",
    "unsigned-binary",
    "outbound-scan",
    "registry-persist",
    "tamper-attempt",
)
EXES = ("bash", "python", "java", "chrome", "sshd", "curl", "node", "postgres", "backup")

PROCESSES = pa.schema(
    [
        ("ts", pa.int64()),
        ("host", pa.string()),
        ("pid", pa.int64()),
        ("user", pa.string()),
        ("exe", pa.string()),
        ("action", pa.string()),
    ]
)
ALERTS = pa.schema(
    [
        ("ts", pa.int64()),
        ("host", pa.string()),
        ("pid", pa.int64()),
        ("rule", pa.string()),
        ("severity", pa.int64()),
    ]
)


def generate(
    minutes: float = 10,
    *,
    hosts: int = 40,
    users: int = 60,
    processes_per_minute: float = 400,
    compromised: int = 3,
    seed: int = 0,
) -> tuple[pa.Table, pa.Table]:
    """The ``processes`` and ``alerts`` tables of ``minutes`` minutes (see the module docstring).

    ``compromised`` users each have an incident of three minutes, placed at random, during
    which their processes raise about one alert per second.
    """
    if minutes <= 0 or hosts < 1 or users < 1 or processes_per_minute <= 0 or compromised < 0:
        raise ValueError("minutes, hosts, users and processes_per_minute must be positive")
    rng = np.random.default_rng(seed)
    span = int(minutes * MINUTE_MS)
    n = max(1, int(processes_per_minute * minutes))

    # Processes: start times, host, owner (power law over users), program, lifetime.
    start = np.sort(rng.integers(0, span, n))
    host = rng.integers(0, hosts, n)
    rank = np.minimum((rng.pareto(1.2, n) * 3).astype(np.int64), users - 1)
    user_of_rank = rng.permutation(users)
    user = user_of_rank[rank]
    exe = rng.integers(0, len(EXES), n)
    life = 1_000 + rng.exponential(120_000, n).astype(np.int64)
    end = start + life
    pid = np.empty(n, np.int64)
    for h in range(hosts):  # pids count up per host from 1000
        mine = np.flatnonzero(host == h)
        pid[mine] = 1_000 + np.arange(len(mine))

    # Background alerts: a process raises one every 20 minutes on average.
    seen = np.minimum(end, span) - start
    background = rng.poisson(seen / (20 * MINUTE_MS))
    owner = np.repeat(np.arange(n), background)
    alert_ts = start[owner] + 1 + (rng.random(len(owner)) * (seen[owner] - 2)).astype(np.int64)

    # Incidents: every process of a compromised user alerts about once a second meanwhile.
    bad_users = rng.choice(users, size=min(compromised, users), replace=False)
    incident_start = rng.integers(0, max(1, span - 3 * MINUTE_MS), len(bad_users))
    burst_owner, burst_ts = [owner], [alert_ts]
    for bad, t0 in zip(bad_users, incident_start):
        t1 = t0 + 3 * MINUTE_MS
        mine = np.flatnonzero((user == bad) & (start < t1) & (np.minimum(end, span) > t0))
        lo = np.maximum(start[mine] + 1, t0)
        hi = np.minimum(np.minimum(end[mine], span), t1)
        count = rng.poisson(np.maximum(hi - lo, 0) / 1_000)
        which = np.repeat(np.arange(len(mine)), count)
        burst_owner.append(mine[which])
        burst_ts.append(lo[which] + (rng.random(len(which)) * (hi - lo)[which]).astype(np.int64))
    owner = np.concatenate(burst_owner)
    alert_ts = np.concatenate(burst_ts)
    alert_host = host[owner]
    alert_pid = pid[owner]

    # A few alerts from system processes that started before the log (pid < 1000).
    system = max(1, len(owner) // 50)
    alert_ts = np.concatenate([alert_ts, rng.integers(0, span, system)])
    alert_host = np.concatenate([alert_host, rng.integers(0, hosts, system)])
    alert_pid = np.concatenate([alert_pid, rng.integers(1, 1_000, system)])
    rule = rng.integers(0, len(RULES), len(alert_ts))
    severity = np.minimum(1 + rng.poisson(1.0, len(alert_ts)), 5)
    order = np.argsort(alert_ts, kind="stable")

    ended = end < span
    proc_ts = np.concatenate([start, end[ended]])
    proc_idx = np.concatenate([np.arange(n), np.flatnonzero(ended)])
    action = np.concatenate([np.zeros(n, np.int8), np.ones(int(ended.sum()), np.int8)])
    proc_order = np.lexsort((action, proc_ts))  # by time; a start before an end at one time
    proc_ts, proc_idx, action = proc_ts[proc_order], proc_idx[proc_order], action[proc_order]

    processes = pa.table(
        [
            pa.array(START_MS + proc_ts, pa.int64()),
            _names("host", hosts, host[proc_idx]),
            pa.array(pid[proc_idx], pa.int64()),
            _names("user", users, user[proc_idx]),
            pa.array(np.array(EXES)[exe[proc_idx]]),
            pa.array(np.array(["start", "end"])[action]),
        ],
        schema=PROCESSES,
    )
    alerts = pa.table(
        [
            pa.array(START_MS + alert_ts[order], pa.int64()),
            _names("host", hosts, alert_host[order]),
            pa.array(alert_pid[order], pa.int64()),
            pa.array(np.array(RULES)[rule[order]]),
            pa.array(severity[order], pa.int64()),
        ],
        schema=ALERTS,
    )
    return processes, alerts


def _names(prefix: str, count: int, index: np.ndarray) -> pa.Array:
    width = len(str(count - 1))
    names = np.array([f"{prefix}-{i:0{width}d}" for i in range(count)])
    return pa.array(names[index])


def write(tables: tuple[pa.Table, pa.Table], directory: str | Path) -> tuple[Path, Path]:
    """Write ``processes.parquet`` and ``alerts.parquet`` into ``directory``."""
    from .social import write as write_one

    processes, alerts = tables
    directory = Path(directory)
    return (
        write_one(processes, directory / "processes.parquet"),
        write_one(alerts, directory / "alerts.parquet"),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m sample_data.streamscope --out DIR [--minutes M] [--seed S] ...``."""
    parser = argparse.ArgumentParser(
        prog="python -m sample_data.streamscope",
        description="Write a synthetic processes stream and an alerts stream as Parquet files.",
    )
    parser.add_argument("--out", required=True, help="directory for processes/alerts.parquet")
    parser.add_argument("--minutes", type=float, default=10, help="length of the log (10)")
    parser.add_argument("--hosts", type=int, default=40, help="number of hosts (40)")
    parser.add_argument("--users", type=int, default=60, help="number of users (60)")
    parser.add_argument(
        "--rate", type=float, default=400, help="processes started per minute (400)"
    )
    parser.add_argument("--compromised", type=int, default=3, help="compromised users (3)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        tables = generate(
            args.minutes,
            hosts=args.hosts,
            users=args.users,
            processes_per_minute=args.rate,
            compromised=args.compromised,
            seed=args.seed,
        )
    except ValueError as exc:
        parser.error(str(exc))
    paths = write(tables, args.out)
    print(
        f"wrote {paths[0]} ({tables[0].num_rows:,} process events) and {paths[1]} "
        f"({tables[1].num_rows:,} alerts) in {time.perf_counter() - started:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
