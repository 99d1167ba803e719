"""A replay as a user's notebook runs it, with the kernel's process tree polled for its peak.

A fresh kernel (jupyter_client, the ``python3`` kernel) loads the extension and runs the rule as
a ``%%restream`` cell over a log given as a path. A thread polls the resident memory of the
kernel's whole process tree (on Spark: the kernel, the JVM and its Python workers) from the
kernel's start to its shutdown, and each process's CPU time as last seen.
"""

from __future__ import annotations

import json
import queue
import tempfile
import threading
import time
from pathlib import Path

import psutil
from jupyter_client.manager import start_new_kernel

__all__ = ["TreeSampler", "notebook_peak"]

#: The cell's engine options, per engine (the command line's, as ``bench.scale.ENGINES``).
CELL_ENGINES = {"serial": "--engine serial", "spark": "--engine spark --master local[2]"}


class TreeSampler(threading.Thread):
    """Polls a process and its descendants: the peak of their summed resident memory, the
    root's own peak, and the CPU time (user + system) each process was last seen with."""

    def __init__(self, pid: int, interval: float = 0.1):
        super().__init__(daemon=True)
        self.root, self.interval = psutil.Process(pid), interval
        self.peak = self.own = 0
        self.cpu: dict[int, float] = {}
        self._done = threading.Event()

    def sample(self) -> None:
        """One poll of the tree (processes that went meanwhile are skipped)."""
        try:
            tree = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        sizes = []
        for proc in tree:
            try:
                with proc.oneshot():
                    sizes.append(proc.memory_info().rss)
                    times = proc.cpu_times()
                self.cpu[proc.pid] = times.user + times.system
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                sizes.append(0)
        self.peak, self.own = max(self.peak, sum(sizes)), max(self.own, sizes[0])

    def run(self) -> None:
        while not self._done.is_set():
            self.sample()
            self._done.wait(self.interval)

    def stop(self) -> dict:
        """Stop polling (if started as a thread); the figures in MB and CPU seconds."""
        self._done.set()
        if self.is_alive():
            self.join()
        return {
            "peak_mb": round(self.peak / 2**20, 1),
            "own_peak_mb": round(self.own / 2**20, 1),
            "cpu_s": round(sum(self.cpu.values()), 2),
        }


def _execute(client, code: str, timeout: float) -> tuple[str, str]:
    """Run ``code`` in the kernel; its status (``ok`` or ``error``) and what it printed."""
    msg_id = client.execute(code)
    printed: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = client.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        content = msg["content"]
        if msg["msg_type"] == "stream":
            printed.append(content["text"])
        elif msg["msg_type"] == "error":
            printed.append("\n".join(content["traceback"]))
        elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
            return client.get_shell_msg(timeout=30)["content"]["status"], "".join(printed)
    return "timeout", "".join(printed) + f"\nno reply in {timeout} s"


def notebook_peak(
    log: Path, engine: str, env: dict[str, str], program: Path, timeout: float = 7200
) -> dict:
    """Replay ``program`` over ``log`` as a ``%%restream`` cell in a fresh kernel started with
    ``env`` (its ``RESTREAM_HOME`` the catalog and cache). Not compared with a serial replay
    (``--compare-limit 0``): the cell's own replay is what is measured."""
    cell = (
        f"%%restream scale --log {log} {CELL_ENGINES[engine]} --compare-limit 0\n"
        + program.read_text()
    )
    facts = (
        "import json; m = scale.result.metrics; "
        "print(json.dumps([scale.status, m.wall_s, m.events, m.rows]))"
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="restream-scale-kernel-") as folder:
        manager, client = start_new_kernel(
            kernel_name="python3",
            cwd=folder,
            env=dict(env, RESTREAM_DISPLAY="text"),
            startup_timeout=120,
        )
        sampler = TreeSampler(manager.provisioner.process.pid)
        sampler.start()
        try:
            steps = [("%load_ext restream_kit", 120), (cell, timeout), (facts, 60)]
            for code, limit in steps:
                status, printed = _execute(client, code, limit)
                if status != "ok":
                    break
            cell_s = time.perf_counter() - started
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=False)
            got = sampler.stop()
    result = {**got, "wall_s": round(cell_s, 2), "rc": 0 if status == "ok" else 1}
    if status == "ok":
        status, replay_s, events, rows = json.loads(printed.strip().splitlines()[-1])
        result.update(replay_wall_s=round(replay_s, 2), run_status=status, events=events)
        result["summary"] = [f"replayed {events:,} events in {replay_s:.1f} s, rows {rows}"]
        result["rc"] = 0 if status == "ok" else 1
    else:
        result["error"] = printed[-2000:]
    return result
