"""The plan's figures render, live and as static images for the README."""

from __future__ import annotations

import shutil

import pytest

import restream_kit as rk
from widgets.plan_figures import dag_figure, hot_keys_figure, save_image, speedup_figure

SAMPLE = "sample_data/social_small.parquet"


@pytest.fixture(scope="module")
def antispam_plan(root):
    return rk.plan(
        rk.Program.from_file(root / "examples" / "antispam.py"), rk.Log(str(root / SAMPLE))
    )


def test_dag_figure_marks_every_handler_and_state(antispam_plan):
    fig = dag_figure(antispam_plan)
    text = " ".join(str(t) for trace in fig.data for t in (trace.text or []) if t)
    for name in ("befriend", "tally_sender", "tally_ip", "flag", "friends", "ip_msgs"):
        assert name in text
    assert "critical path" in fig.layout.title.text


def test_hot_keys_and_speedup_figures_use_the_data_path(root):
    # rate_limit counts messages per sender: a partitioned stage whose hot senders show up.
    program = rk.Program.from_file(root / "examples" / "plans" / "rate_limit.py")
    the_plan = rk.plan(program, rk.Log(str(root / SAMPLE)))
    hot = hot_keys_figure(the_plan)
    speed = speedup_figure(the_plan, measured={1: 1.0, 2: 1.7})
    assert sum(len(t.x or ()) for t in hot.data) > 0
    xs = [list(t.x) for t in speed.data]
    assert [1, 2, 4, 8, 16, 32, 64] in xs and [1, 2] in xs


def test_static_image_export(antispam_plan, tmp_path):
    assert shutil.which("chromium") or shutil.which("chromium-browser"), (
        "static export needs Chromium: run scripts/ensure_chromium.sh (make setup does)"
    )
    path = save_image(dag_figure(antispam_plan), tmp_path / "dag.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
