"""Kills of a checkpointed replay, for ``python -m bench spark-rules --kills``.

A whole ``restream replay ... --engine spark`` process without a checkpoint is timed once, then
the same with ``--checkpoint DIR --checkpoint-every EVERY`` (the checkpoint's cost as a whole
process, in wall time and in its tree's CPU time), and its replay from when it opened its
checkpoint (after the session's start and the log's read); then, for each fraction of the
replay's time (a quarter, a half, three quarters), the same process is started afresh and killed
with SIGKILL at that moment of its replay (its process group: its JVM goes with it). What it
left is read from the checkpoint's manifest: the events committed, and the age of the last
commit when the kill came (the time since the manifest naming it was written). The replay is
then resumed in this process and its result compared with the uncheckpointed one, table for
table and state for state.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

__all__ = ["kills", "FRACTIONS"]

FRACTIONS = (0.25, 0.5, 0.75)


def kills(
    program_path: Path, log_path: Path, master: str, every: str, want: Any, same: Any
) -> dict:
    """The kills of one rule (``want``: the uncheckpointed result, ``same(got, want)``
    checks a result against it)."""
    import restream_kit as rk

    program, log = rk.Program.from_file(program_path), rk.Log(log_path)
    out: dict[str, Any] = {"checkpoint_every": every}
    with tempfile.TemporaryDirectory() as tmp:
        # The same process without a checkpoint first: the cost of checkpointing as a whole
        # process, in wall time and in the CPU time of its tree (steadier on a shared machine).
        began = time.perf_counter()
        proc = _start(program_path, log_path, master, every, None)
        plain_cpu = _tree_cpu(proc)
        plain = time.perf_counter() - began
        ck = Path(tmp) / "whole"
        began = time.perf_counter()
        proc = _start(program_path, log_path, master, every, ck)
        opened_at = _opened(ck, proc)
        timeline: list[tuple[float, int]] = []  # (seconds since it opened, events committed)
        whole_cpu = _tree_cpu(proc, lambda: _committed(ck, opened_at, timeline))
        _committed(ck, opened_at, timeline)  # (a last commit the polls missed)
        whole = time.perf_counter() - began
        out["plain_process_s"], out["plain_cpu_s"], out["whole_cpu_s"] = plain, plain_cpu, whole_cpu
        print(
            f"    whole processes: checkpointed {whole:.1f} s ({whole_cpu:.1f} CPU-s), "
            f"without a checkpoint {plain:.1f} s ({plain_cpu:.1f} CPU-s): cost {whole / plain:.2f}x "
            f"wall, {whole_cpu / plain_cpu:.2f}x CPU"
        )
        # The replay's own time: from when it opened its checkpoint (after the session's
        # start and the log's read) to the process's end. The kills are fractions of it.
        replay = time.perf_counter() - opened_at
        out["whole_process_s"], out["replay_s"] = whole, replay
        out["commits"] = len(_manifest(ck)["epochs"])
        # The worst a kill could lose: the longest stretch of the replay without a new commit
        # (from its opening to the first, between two, as seen by polling every 0.2 s).
        seen = [(0.0, 0), *timeline]
        out["commit_times"] = timeline
        out["longest_without_commit_s"] = max(
            (b[0] - a[0] for a, b in zip(seen, seen[1:])), default=0.0
        )
        print(
            "    commits of the whole process (s after it opened: events): "
            + ", ".join(f"{t:.1f}: {n:,}" for t, n in timeline)
            + f"; at most {out['longest_without_commit_s']:.1f} s without a new commit"
        )
        runs = []
        for fraction in FRACTIONS:
            ck = Path(tmp) / f"killed-{fraction}"
            proc = _start(program_path, log_path, master, every, ck)
            began = time.perf_counter()
            opened = _wait(ck, _opened(ck, proc) + fraction * replay)
            os.killpg(proc.pid, signal.SIGKILL)
            killed_at = time.time()
            proc.wait()
            manifest = _manifest(ck) if (ck / "manifest.json").exists() else {"epochs": []}
            epochs = manifest["epochs"]
            done = epochs[-1]["done"] if epochs else 0
            age = killed_at - (ck / "manifest.json").stat().st_mtime if epochs else None
            started = time.perf_counter()
            got = rk.replay(program, log, engine="spark", master=master, checkpoint=ck, resume=True)
            resume_s = time.perf_counter() - started
            same(got, want, program_path.stem)
            runs.append(
                {
                    "killed_at": fraction,
                    "killed_after_s": time.perf_counter() - began - resume_s,
                    "committed_epochs": len(epochs),
                    "committed_events": done,
                    "commit_age_s": age,
                    # The replay's work lost: since its last commit, or since it began
                    # (when it opened its checkpoint, after the session's start).
                    "lost_s": age if age is not None else _since(opened, killed_at),
                    "resumed_from_epoch": got.resumed_from_epoch,
                    "resume_s": resume_s,
                    "identical": True,
                }
            )
            said = f"{age:.1f} s old" if age is not None else "none yet"
            if age is None:
                said += (
                    f", {_since(opened, killed_at):.1f} s into the replay"
                    if opened is not None
                    else ", before the replay began (its session was starting)"
                )
            print(
                f"    killed at {fraction:.0%} of the replay ({fraction * replay:.1f} s of "
                f"{replay:.1f} s; the process ran {whole:.1f} s in all): "
                f"{done:,} of {len(log):,} events committed, last commit {said}; "
                f"resumed in {resume_s:.1f} s, result identical"
            )
        out["kills"] = runs
    return out


def _start(program: Path, log: Path, master: str, every: str, ck: Path | None) -> subprocess.Popen:
    """The checkpointed whole process (without a checkpoint when ``ck`` is None)."""
    command = [
        sys.executable,
        "-m",
        "restream_kit",
        "replay",
        str(program),
        "--log",
        str(log),
        "--engine",
        "spark",
        "--master",
        master,
        *(["--checkpoint", str(ck), "--checkpoint-every", every] if ck is not None else []),
        "--quiet",
        "--no-record",
    ]
    return subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _tree_cpu(proc: subprocess.Popen, also: Any = None, interval: float = 0.2) -> float:
    """Wait for ``proc``; the CPU seconds of its process tree (its JVM and Python workers),
    polled (each process's last sample: a process's final fraction of a second is missed).
    ``also()`` is called at every poll."""
    seen: dict[int, float] = {}
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        if also is not None:
            also()
        try:
            for p in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    t = p.cpu_times()
                    seen[p.pid] = t.user + t.system
        except psutil.NoSuchProcess:
            pass
        time.sleep(interval)
    if proc.returncode != 0:
        raise RuntimeError(f"the replay process failed: {proc.stderr.read()[-2000:]}")
    return sum(seen.values())


def _opened(ck: Path, proc: subprocess.Popen) -> float:
    """When (``perf_counter``) the replay of ``proc`` opened its checkpoint directory."""
    while not ck.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the checkpointed process failed: {proc.stderr.read()[-2000:]}")
        time.sleep(0.02)
    return time.perf_counter()


def _wait(ck: Path, until: float) -> float | None:
    """Sleep until ``until`` (``perf_counter``); when the replay opened its checkpoint
    directory (``time.time()``), if it did."""
    opened = None
    while time.perf_counter() < until:
        if opened is None and ck.exists():
            opened = time.time()
        time.sleep(0.05)
    return opened


def _committed(ck: Path, opened_at: float, timeline: list[tuple[float, int]]) -> None:
    """Add to ``timeline`` the checkpoint's last commit if it is new: when it was seen
    (seconds after the replay opened ``ck``) and the events it had committed."""
    with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
        done = _manifest(ck)["epochs"][-1]["done"]
        if not timeline or timeline[-1][1] != done:
            timeline.append((time.perf_counter() - opened_at, done))


def _since(opened: float | None, killed_at: float) -> float:
    return killed_at - opened if opened is not None else 0.0


def _manifest(directory: Path) -> dict:
    return json.loads((directory / "manifest.json").read_text())
