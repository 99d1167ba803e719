"""``restream bench``: the benchmarks of a checkout, or a small one that ships with the package.

In a source checkout (the ``bench`` package beside ``restream_kit``, next to the project's
``pyproject.toml``) ``restream bench [NAME ...] [options]`` is ``python -m bench`` run from the
checkout's root: every benchmark, or the named ones, with their own options.

Installed from a wheel there is no ``bench`` package, so ``restream bench`` runs the built-in
one (``--builtin`` asks for it in a checkout too): the serial engine against a plain-Python
loop, both running the anti-spam rule over the shipped ``social_small`` log (50,000 events),
in this process, interleaved, ``--runs`` times each. Both must give the same spam rows; the
ratio ``plain median / serial median`` says how close the engine comes to hand-written Python
on this machine (1.0: as fast). Like every benchmark of the project it is a ratio measured in
one run, never an absolute time to compare across machines.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..model.errors import RestreamError

__all__ = ["checkout_root", "run_checkout", "run_builtin", "plain_antispam"]


def checkout_root() -> Path | None:
    """The source checkout this ``restream_kit`` runs from, when it has a ``bench`` package."""
    root = Path(__file__).resolve().parents[2]
    project = root / "pyproject.toml"
    if (root / "bench" / "__main__.py").exists() and project.exists():
        if 'name = "restream_kit"' in project.read_text(errors="replace"):
            return root
    return None


def run_checkout(root: Path, argv: list[str]) -> int:
    """``python -m bench ARGV`` in the checkout ``root``; its exit status."""
    return subprocess.run([sys.executable, "-m", "bench", *argv], cwd=root).returncode


def plain_antispam(path: Path) -> list[tuple[int, int]]:
    """The anti-spam rule by hand over a log in time order: ``(lsn, sender)`` per spam row.

    One dict per piece of state; a row's position is its lsn (what the engine's stable sort
    gives a log already in time order)."""
    import pyarrow.parquet as pq

    columns = ["kind", "src", "dst", "ip", "has_email"]
    table = pq.read_table(path, columns=columns)
    kind, src, dst, ip, has_email = (table.column(c).to_pylist() for c in columns)
    friends: set[tuple[int, int]] = set()
    to_friends: dict[int, int] = {}
    to_strangers: dict[int, int] = {}
    ip_msgs: dict[str, int] = {}
    ip_emails: dict[str, int] = {}
    spam = []
    for lsn, (k, s, d, i, email) in enumerate(zip(kind, src, dst, ip, has_email)):
        if k == "friendship":
            friends.add((s, d))
            friends.add((d, s))
        elif k == "message":
            if (s, d) in friends:
                to_friends[s] = to_friends.get(s, 0) + 1
            else:
                to_strangers[s] = to_strangers.get(s, 0) + 1
            ip_msgs[i] = ip_msgs.get(i, 0) + 1
            if email:
                ip_emails[i] = ip_emails.get(i, 0) + 1
            strangers, known = to_strangers.get(s, 0), to_friends.get(s, 0)
            if strangers > 2 * known and ip_emails.get(i, 0) > 0.2 * ip_msgs[i]:
                spam.append((lsn, s))
    return spam


def _serial(program: Path, log: Path) -> list[tuple[int, int]]:
    from ..api import replay

    spam = replay(str(program), str(log), check=False).tables.get("spam")
    if spam is None:
        return []
    return list(zip(spam.column("lsn").to_pylist(), spam.column("sender").to_pylist()))


def run_builtin(runs: int = 5, as_json: bool = False) -> int:
    """Time the serial engine against the plain loop on the shipped sample; print the table
    (or one JSON object); raise :class:`RestreamError` when the two disagree."""
    import pyarrow.parquet as pq

    from ..io.samples import sample_data, sample_program

    if runs < 1:
        raise RestreamError(f"--runs {runs}: give at least 1")
    program, log = sample_program("antispam"), sample_data("social_small")
    events = pq.read_metadata(log).num_rows
    sides = {
        "plain loop": lambda: plain_antispam(log),
        "serial engine": lambda: _serial(program, log),
    }
    want = sides["plain loop"]()
    got = sides["serial engine"]()  # untimed: also caches the log's sorted form
    if got != want:
        raise RestreamError(
            f"the serial engine gave {len(got):,} spam rows and the plain loop {len(want):,}; "
            "they must be identical"
        )
    seconds: dict[str, list[float]] = {side: [] for side in sides}
    for i in range(runs):
        for side in list(sides) if i % 2 == 0 else list(reversed(sides)):
            started = time.perf_counter()
            rows = sides[side]()
            seconds[side].append(time.perf_counter() - started)
            if rows != want:
                raise RestreamError(f"{side} gave other spam rows in timed run {i + 1}")
    median = {side: statistics.median(ts) for side, ts in seconds.items()}
    ratio = median["plain loop"] / median["serial engine"]
    summary = {
        "benchmark": "builtin serial vs plain loop",
        "program": str(program),
        "log": str(log),
        "events": events,
        "spam_rows": len(want),
        "runs": runs,
        "median_s": median,
        "ratio": ratio,
    }
    if as_json:
        print(json.dumps(summary))
        return 0
    print(f"serial engine vs a plain-Python loop, anti-spam rule, {events:,} events (social_small)")
    print(f"both give the same {len(want):,} spam rows; {runs} interleaved timed run(s) each:")
    print(f"  {'':<14} {'median s':>9} {'events/s':>11}")
    for side, m in median.items():
        print(f"  {side:<14} {m:>9.3f} {events / m:>11,.0f}")
    print(f"ratio plain/serial: {ratio:.2f} (the serial engine at {ratio:.2f}x the loop's speed)")
    return 0
