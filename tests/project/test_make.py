"""``make lab`` needs no browser and no root; ``make test`` installs Chromium for the browser
tests, or says in one line why it cannot, and runs ruff and the whole suite either way."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ensure_chromium.sh"


def planned(target: str) -> str:
    """The commands ``make TARGET`` would run (``make -n`` runs none of them)."""
    out = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("target", ["setup", "lab"])
def test_setup_and_lab_install_no_browser(target):
    commands = planned(target)
    assert "ensure_chromium" not in commands and "apt-get" not in commands
    assert "--allow-root" in planned("lab")  # runs as root too, but never needs it


def test_make_test_ensures_chromium_then_runs_ruff_and_every_test():
    commands = planned("test").splitlines()
    ensure = next(i for i, c in enumerate(commands) if "scripts/ensure_chromium.sh ||" in c)
    ruff = next(i for i, c in enumerate(commands) if c.endswith("ruff check ."))
    # Every test: the whole folder, nothing narrowing it (only the slowest tests' report).
    pytest_ = next(
        i for i, c in enumerate(commands) if re.search(r"-m pytest tests( --durations=\d+)?$", c)
    )
    assert ensure < ruff < pytest_
    assert "browser tests will fail" in commands[ensure]


def _fails_in_one_line(command: list[str], env: dict) -> str:
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("ensure_chromium: cannot install Chromium for the browser tests")
    assert "apt-get install -y restream-no-such-package" in lines[0]
    return lines[0]


def test_without_root_it_says_so_in_one_line():
    """As an ordinary user (``nobody``), with a package that is missing: no apt-get is run."""
    if os.getuid() != 0 or not shutil.which("setpriv") or not shutil.which("apt-get"):
        pytest.fail("this test runs as root on a Debian machine (it drops to user nobody)")
    with tempfile.TemporaryDirectory() as folder:  # in /tmp: user nobody can reach it
        Path(folder).chmod(0o755)
        script = Path(folder) / "ensure_chromium.sh"
        shutil.copy(SCRIPT, script)
        script.chmod(0o755)
        env = {"PATH": os.environ["PATH"], "RESTREAM_CHROMIUM_PACKAGES": "restream-no-such-package"}
        line = _fails_in_one_line(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", str(script)], env
        )
    assert "installing needs root" in line


def test_without_apt_it_says_so_in_one_line(tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("dpkg-query", "id", "mktemp", "cat", "rm"):
        if shutil.which(tool):
            (tools / tool).symlink_to(shutil.which(tool))
    env = {"PATH": str(tools), "RESTREAM_CHROMIUM_PACKAGES": "restream-no-such-package"}
    line = _fails_in_one_line(["/bin/bash", str(SCRIPT)], env)
    assert "apt-get is not available" in line
