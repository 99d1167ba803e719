"""``%%restream`` cells in a real kernel (jupyter_client): they block until their replay ends,
an interrupt cancels a Spark replay and leaves the process tree idle, a failing cell raises
with the cell's own line so that the cells after it do not run, and the JVM stays silent."""

from __future__ import annotations

import os
import queue
import sys
import time
from pathlib import Path

import psutil
import pytest
from jupyter_client.manager import start_new_kernel

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = "social_small"

SLOW_RULE = """\
from restream_kit import emit, on, state

work = state.Counter()


@on("message")
def grind(e):
    x = 0
    for i in range(4000):
        x += i % 7
    work[e.src] += x % 3
"""

FAILING_RULE = """\
from restream_kit import emit, on, state

seen = state.Counter()


@on("message")
def count(e):
    seen[e.src] += 1
    if seen[e.src] > 3:
        emit("odd", ratio=1 / (seen[e.src] - seen[e.src]))
"""


class Kernel:
    """A kernel and its client; ``run`` executes one cell and collects what it showed."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self.manager, self.client = start_new_kernel(
            kernel_name="python3", cwd=str(cwd), env=env, startup_timeout=120
        )

    def execute(self, code: str) -> str:
        return self.client.execute(code, store_history=True)

    def outputs(self, msg_id: str, timeout: float, until=None) -> tuple[dict, list[dict]]:
        """Wait for the reply to ``msg_id``, collecting its iopub outputs; ``until(outputs)``
        is called after each one (e.g. to interrupt once something appears)."""
        outputs: list[dict] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=0.5)
            except queue.Empty:
                msg = None
            if msg is not None and msg["parent_header"].get("msg_id") == msg_id:
                kind = msg["msg_type"]
                if kind == "execute_input":  # the cell starts (the frontend shows [*])
                    self.started = time.monotonic()
                if kind in ("stream", "error", "display_data", "execute_result"):
                    outputs.append({"type": kind, **msg["content"]})
                    if until is not None:
                        until(outputs)
                if kind == "status" and msg["content"]["execution_state"] == "idle":
                    reply = self.client.get_shell_msg(timeout=30)
                    while reply["parent_header"]["msg_id"] != msg_id:
                        # A late kernel_info reply (start_new_kernel asks again under load).
                        assert reply["msg_type"] == "kernel_info_reply", reply
                        reply = self.client.get_shell_msg(timeout=30)
                    return reply["content"], outputs
            if time.monotonic() > deadline:
                raise AssertionError(f"no reply in {timeout} s; outputs so far: {outputs}")

    def run(self, code: str, timeout: float = 300, until=None) -> tuple[dict, list[dict]]:
        return self.outputs(self.execute(code), timeout, until)

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernel(tmp_path):
    env = dict(
        os.environ,
        RESTREAM_HOME=str(tmp_path / ".restream"),
        RESTREAM_DISPLAY="text",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    k = Kernel(tmp_path, env)
    reply, _ = k.run("%load_ext restream_kit", timeout=120)
    assert reply["status"] == "ok", reply
    yield k
    k.close()


def text_of(outputs: list[dict]) -> str:
    parts = []
    for o in outputs:
        if o["type"] == "stream":
            parts.append(o["text"])
        elif o["type"] == "error":
            parts.append("\n".join(o["traceback"]))
    return "".join(parts)


def busy_descendants(pid: int, window_s: float = 3.0) -> dict[str, float]:
    """CPU use (percent of one core) of each process under ``pid`` over ``window_s``."""
    procs = psutil.Process(pid).children(recursive=True)
    for p in procs:
        try:
            p.cpu_percent(None)
        except psutil.NoSuchProcess:
            pass
    time.sleep(window_s)
    use = {}
    for p in procs:
        try:
            use[f"{p.pid} {' '.join(p.cmdline()[:3])[:80]}"] = p.cpu_percent(None)
        except psutil.NoSuchProcess:
            pass
    return use


def test_a_cell_blocks_until_its_replay_ends_and_binds_the_finished_run(kernel):
    reply, outputs = kernel.run(f"%%restream v1 --log {SAMPLE}\n{SLOW_RULE.replace('4000', '1')}")
    assert reply["status"] == "ok", text_of(outputs)
    assert "diff against serial replay of v1" in text_of(outputs)
    reply, outputs = kernel.run("print(v1.status, v1.ok, v1.wait() is v1)")
    assert text_of(outputs).split() == ["ok", "True", "True"]


def test_a_failing_cell_raises_with_its_own_line_and_stops_the_cells_after_it(kernel):
    # Run All sends every cell at once; a failed cell makes the kernel drop the queued ones.
    failing = kernel.execute(f"%%restream bad --log {SAMPLE}\n{FAILING_RULE}")
    after = kernel.execute("print('the next cell ran')")
    reply, outputs = kernel.outputs(failing, timeout=300)
    assert reply["status"] == "error" and reply["ename"] == "HandlerError"
    shown = text_of(outputs)
    # Line 11 of the cell (the magic's line is line 1) is the division.
    assert "<restream bad>:11:" in shown and "ZeroDivisionError" in shown, shown
    assert "Traceback" not in shown and "workbench.py" not in shown and "threading" not in shown
    reply, outputs = kernel.outputs(after, timeout=60)
    assert reply["status"] == "aborted" and "the next cell ran" not in text_of(outputs)
    reply, outputs = kernel.run("print(bad.status)")
    assert text_of(outputs).strip() == "failed"


def test_interrupt_cancels_a_spark_replay_and_the_process_tree_goes_idle(kernel, tmp_path):
    reply, outputs = kernel.run(
        f"%%restream cheap --log {SAMPLE}\n{SLOW_RULE.replace('4000', '1')}", timeout=300
    )
    assert reply["status"] == "ok", text_of(outputs)
    # The slow cell compares with the cheap one (reused from the catalog), so its replay on
    # Spark starts without a slow serial baseline first.
    interrupted: list[float] = []

    def interrupt_once_replaying(outs):
        if not interrupted and "events/s" in text_of(outs):
            time.sleep(3)  # let Spark's tasks get going
            kernel.manager.interrupt_kernel()
            interrupted.append(time.monotonic())

    reply, outputs = kernel.run(
        f"%%restream slow --log {SAMPLE} --engine spark --baseline cheap\n{SLOW_RULE}",
        timeout=600,
        until=interrupt_once_replaying,
    )
    ended = time.monotonic()
    shown = text_of(outputs)
    assert interrupted, f"the replay never reported progress: {shown}"
    assert reply["status"] == "error" and reply["ename"] == "ReplayCancelled", shown
    errors = [o for o in outputs if o["type"] == "error"]
    assert len(errors) == 1 and len(errors[0]["traceback"]) == 1
    line = errors[0]["traceback"][0]
    assert line.startswith("cancelled at epoch ") and " events" in line, line
    assert ended - interrupted[0] < 15, f"the cell took {ended - interrupted[0]:.1f} s to stop"
    # The JVM's own lines went to its log file, not to the cell.
    for noise in ("log4j", "NativeCodeLoader", "incubator", "loopback"):
        assert noise not in shown, shown
    assert (tmp_path / ".restream" / "spark.log").is_file()
    # The next cell runs at once; Spark has no job left, and nothing under the kernel works.
    reply, outputs = kernel.run(
        "from restream_kit.engines.spark import get_session\n"
        "print(get_session().sparkContext.statusTracker().getActiveJobsIds(), slow.status)",
        timeout=60,
    )
    assert reply["status"] == "ok" and text_of(outputs).split() == ["[]", "cancelled"], outputs
    # Spark kills a cancelled task's Python worker after its kill timeout (2 s); the JVM may
    # go on compiling for a moment. Within a few seconds the whole tree is idle.
    samples = [busy_descendants(kernel.manager.provisioner.pid, window_s=2.0)]
    while sum(samples[-1].values()) >= 10 and time.monotonic() < ended + 20:
        samples.append(busy_descendants(kernel.manager.provisioner.pid, window_s=2.0))
    assert sum(samples[-1].values()) < 10, samples
    print(
        f"cell ended {ended - interrupted[0]:.1f} s after the interrupt; "
        f"idle {time.monotonic() - ended:.1f} s after the cell ended: {samples}"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-x", "-q"]))
