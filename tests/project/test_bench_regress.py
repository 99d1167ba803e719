"""``python -m bench regress --base REV``: a tiny run against ``HEAD``, both sides the same
code, checked for the report's shape, its ratios, and the worktree it leaves behind (none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _worktrees() -> set[str]:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list", "--porcelain"], capture_output=True, text=True
    )
    return {line for line in out.stdout.splitlines() if line.startswith("worktree ")}


def test_regress_against_head_reports_a_ratio_per_rule(tmp_path):
    before = _worktrees()
    out = tmp_path / "regress.json"
    command = [sys.executable, "-m", "bench", "regress", "--base", "HEAD", "--events", "400"]
    command += ["--runs", "1", "--no-spark", "--log", str(tmp_path / "log.parquet")]
    command += ["--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    names = list(report["rules"])
    assert names[0] == "serial/antispam" and "reuse/antispam" in names
    assert "cli/antispam" in names and any(n.startswith("windows/") for n in names)
    assert not any(n.startswith("spark/") for n in names)
    for name, row in report["rules"].items():
        assert "DIFFERS" not in row["flags"], name  # the same tree computes the same tables
        for measure in ("wall", "cpu"):
            got = row[measure]
            assert got["base_s"] > 0 and got["current_s"] > 0, (name, got)
            assert abs(got["ratio"] - got["current_s"] / got["base_s"]) < 1e-9
            assert (f"SLOWER ({measure})" in row["flags"]) == (got["ratio"] > 1.05)
        # The table prints the ratios the report holds, one line per rule.
        line = next(line for line in proc.stdout.splitlines() if line.split()[:1] == [name])
        assert f"{row['wall']['ratio']:.3f}" in line and f"{row['cpu']['ratio']:.3f}" in line
    assert proc.returncode == (1 if any(r["flags"] for r in report["rules"].values()) else 0)
    assert _worktrees() == before  # the base's temporary worktree is gone
