"""Time to "done" of ``%%restream`` cells in a real kernel, against the replays' own wall time.

``python -m bench cells [--engines serial,spark] [--log NAME] [--epoch SIZE] [--display text|widgets]
[--out JSON]``

For each engine, a fresh kernel (jupyter_client, the ``python3`` kernel) in a scratch folder
with its own run catalog runs ``%load_ext restream_kit`` (untimed), then three cells on the
sample log: ``v1`` (the first ``%%restream`` cell of the kernel: imports, plan, on Spark the
session's start), then ``v2`` and ``v3``, each the anti-spam rule with another threshold and
``--baseline v1`` (later cells: the baseline comes from the catalog). A cell blocks until its
replay ends, so its time to "done" is the time from the execute request to the kernel's reply.
Each cell's replay reports its own wall time (``run.result.metrics.wall_s``); the ratio is
``time to done / replay wall``, both measured in the same run. Without ``--epoch`` the cells
cut the log as a notebook does (about ten epochs, so that the monitor moves); ``--epoch 50000``
times one epoch, to see what progress costs. The cells' outputs are checked
(finished, the expected diff) before anything is reported.

This times the kernel's side; the browser's rendering is what
``tests/browser/test_cells_browser.py`` times (the first serial cell done within 3 s).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "run", "CELLS"]

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results" / "cells.json"

#: Cell name -> (the rule's last threshold, its baseline).
CELLS: dict[str, tuple[str, str | None]] = {
    "v1": ("0.2", None),
    "v2": ("0.3", "v1"),
    "v3": ("0.25", "v1"),
}


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run, print and write the JSON; 1 when a cell did not finish."""
    parser = argparse.ArgumentParser(prog="python -m bench cells", description=__doc__)
    parser.add_argument("--engines", default="serial,spark", help="engines (serial,spark)")
    parser.add_argument("--log", default="social_small", help="sample log name (social_small)")
    parser.add_argument("--epoch", help="the cells' --epoch (default: as a notebook cuts)")
    parser.add_argument("--display", default="text", choices=["text", "widgets"])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where to write the JSON")
    args = parser.parse_args(argv)
    try:
        run(args.engines.split(","), args.log, args.display, Path(args.out), args.epoch)
    except AssertionError as exc:
        print(f"cells FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


def _rule(threshold: str) -> str:
    from restream_kit.io.samples import sample_program

    source = sample_program("antispam").read_text()
    out = source.replace("0.2 * ip_msgs", f"{threshold} * ip_msgs")
    assert "0.2 * ip_msgs" in source, "the anti-spam rule no longer has its 0.2 share threshold"
    return out


class _Kernel:
    def __init__(self, folder: Path, display: str):
        from jupyter_client.manager import start_new_kernel

        env = dict(
            os.environ,
            RESTREAM_HOME=str(folder / ".restream"),
            RESTREAM_DISPLAY=display,
            PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        )
        self.manager, self.client = start_new_kernel(
            kernel_name="python3", cwd=str(folder), env=env, startup_timeout=120
        )

    def run(self, code: str, timeout: float = 600) -> tuple[float, dict, str]:
        """Execute ``code``; seconds to the reply, the reply, and what it printed."""
        started = time.perf_counter()
        msg_id = self.client.execute(code)
        printed: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=0.5)
            except queue.Empty:
                msg = None
            if msg is not None and msg["parent_header"].get("msg_id") == msg_id:
                content = msg["content"]
                if msg["msg_type"] == "stream":
                    printed.append(content["text"])
                elif msg["msg_type"] == "error":
                    printed.append("\n".join(content["traceback"]))
                elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
                    took = time.perf_counter() - started
                    reply = self.client.get_shell_msg(timeout=30)["content"]
                    return took, reply, "".join(printed)
            assert time.monotonic() < deadline, f"no reply in {timeout} s: {''.join(printed)}"

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def _one_engine(engine: str, log: str, display: str, epoch: str | None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="restream-cells-") as folder:
        kernel = _Kernel(Path(folder), display)
        try:
            _took, reply, printed = kernel.run("%load_ext restream_kit", timeout=120)
            assert reply["status"] == "ok", printed
            for position, (name, (threshold, baseline)) in enumerate(CELLS.items()):
                line = f"%%restream {name} --log {log} --engine {engine}"
                line += f" --baseline {baseline}" if baseline else ""
                line += f" --epoch {epoch}" if epoch else ""
                took, reply, printed = kernel.run(f"{line}\n{_rule(threshold)}")
                assert reply["status"] == "ok", f"{engine} {name}: {printed[-2000:]}"
                _t, reply, facts = kernel.run(
                    f"import json; print(json.dumps([{name}.status, {name}.result.metrics.wall_s,"
                    f" {name}.diff.summary()]))"
                )
                assert reply["status"] == "ok", facts
                status, wall, summary = json.loads(facts.strip().splitlines()[-1])
                assert status == "ok", f"{engine} {name}: {status}"
                spam = summary.get("spam", {})
                if baseline is None:
                    assert not any(spam.values()), f"{name} differs from its serial baseline"
                else:
                    assert spam.get("removed") or spam.get("added"), f"{name}: no diff {summary}"
                rows.append(
                    {
                        "engine": engine,
                        "cell": name,
                        "position": "first" if position == 0 else "later",
                        "done_s": round(took, 3),
                        "replay_wall_s": round(wall, 3),
                        "ratio": round(took / wall, 1) if wall > 0 else None,
                    }
                )
                print(
                    f"{engine:<7} {name} ({rows[-1]['position']:<5}) done {took:6.2f} s, "
                    f"replay {wall:6.2f} s, ratio {rows[-1]['ratio']}",
                    flush=True,
                )
        finally:
            kernel.close()
    return rows


def run(engines: list[str], log: str, display: str, out: Path, epoch: str | None = None) -> dict:
    """Time the cells on every engine; print a line per cell and write the JSON to ``out``."""
    rows = [row for engine in engines for row in _one_engine(engine, log, display, epoch)]
    result = {
        "benchmark": "cells",
        "log": log,
        "display": display,
        "epoch": epoch,
        "cpus": os.cpu_count(),
        "cells": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out}")
    return result


if __name__ == "__main__":
    sys.exit(main())
