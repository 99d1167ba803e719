"""Benchmark of the planner: plan the anti-spam program on a large log, with its data path.

``run(events)`` builds a log shaped like the anti-spam log (``ts, kind, src, dst, ip,
has_email``; a few friendships, mostly messages, senders drawn from a power law), then times
``plan(program, log)``. The target is under 3 s for a million events.

Run it with ``python -m bench.plan_bench [EVENTS]``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from restream_kit import Log, Program
from restream_kit.planner import plan

__all__ = ["run", "antispam_log"]

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "examples" / "antispam.py"
TARGET_S = 3.0


def antispam_log(
    events: int, *, users: int = 100_000, alpha: float = 1.3, seed: int = 7
) -> pa.Table:
    """A synthetic anti-spam log: 5% friendships, 95% messages, senders ~ rank^-alpha."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, users + 1, dtype=np.float64)
    weights = ranks**-alpha
    weights /= weights.sum()
    src = rng.choice(users, size=events, p=weights)
    dst = rng.integers(0, users, size=events)
    kind = np.where(rng.random(events) < 0.05, "friendship", "message")
    ip = (src * 2654435761 % 5_000).astype(np.int64)
    ts = np.cumsum(rng.integers(0, 50, size=events)).astype(np.int64)
    return pa.table(
        {
            "ts": ts,
            "kind": kind,
            "src": src.astype(np.int64),
            "dst": dst.astype(np.int64),
            "ip": ip,
            "has_email": rng.random(events) < 0.1,
        }
    )


def run(events: int = 1_000_000) -> dict:
    """Plan examples/antispam.py on a synthetic log of ``events`` events; return the timings."""
    program = Program.from_file(PROGRAM)
    started = time.perf_counter()
    log = Log(antispam_log(events), cache=False)
    _ = log.table  # build the canonical log outside the timing
    built = time.perf_counter() - started
    started = time.perf_counter()
    result = plan(program, log)
    plan_s = time.perf_counter() - started
    data = result.data
    return {
        "benchmark": "plan",
        "program": program.name,
        "events": events,
        "log_build_s": round(built, 3),
        "plan_s": round(plan_s, 3),
        "target_s": TARGET_S,
        "ok": plan_s < TARGET_S,
        "stages": len(result.stages),
        "weighting": data.weighting if data else None,
        "speedup_64": dict(data.predicted_speedup).get(64) if data else None,
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000), indent=2))
