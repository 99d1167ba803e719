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


def test_the_readme_plots_a_result_of_any_size(root, monkeypatch):
    """The README's replay example runs, and its chart takes more rows than altair's 5,000."""
    import re

    import polars as pl

    readme = (root / "README.md").read_text()
    block = re.search(r"## A replay\n.*?```python\n(.*?)```", readme, re.S).group(1)
    monkeypatch.chdir(root)
    names: dict = {}
    exec(compile(block, "README.md", "exec"), names)  # noqa: S102 - the README's own code
    assert names["per_hour"]["len"].sum() == names["result"]["spam"].height
    plotting = [ln for ln in block.splitlines() if "per_hour =" in ln or ln.startswith("px.")]
    big = pl.concat([names["result"]["spam"]] * 40)
    assert big.height > 5_000
    names["result"] = {"spam": big}
    exec("\n".join(plotting[:1]), names)  # noqa: S102
    fig = eval(plotting[1].split("#")[0], names)  # noqa: S307
    assert sum(fig.data[0].y) == big.height


def _labels(svg: str, char_px: float) -> list[tuple[float, float, float, str]]:
    """Each label of an SVG: where it starts and ends, its baseline, its text."""
    import re

    found = []
    for x, y, attrs, text in re.findall(
        r"<text x='([\d.]+)' y='([\d.]+)'([^>]*)>([^<]+)</text>", svg
    ):
        width = len(text) * char_px
        start = float(x) - width / 2 if "middle" in attrs else float(x)
        found.append((start, start + width, float(y), text))
    return found


def test_the_dag_is_sized_to_its_content_with_labels_apart(antispam_plan):
    import re

    from widgets.plan_figures import _CHAR_PX, dag_svg

    one = rk.plan(
        rk.Program.from_source(
            "from restream_kit import on, emit\n\n@on('message')\ndef f(e):\n    emit('t', a=1)\n",
            "one",
        )
    )
    small = dag_svg(one)
    width, height = (float(v) for v in re.search(r"width='(\d+)' height='(\d+)'", small).groups())
    assert width < 300 and height < 130, (width, height)
    svg = dag_svg(antispam_plan)
    width = float(re.search(r"width='(\d+)'", svg).group(1))
    labels = _labels(svg, _CHAR_PX)
    assert {"befriend", "tally_sender", "tally_ip", "flag", "friends"} <= {t for *_, t in labels}
    for start, end, _y, text in labels:  # nothing cut at the edges
        assert 0 <= start and end <= width + 1, text
    for i, (start0, end0, y0, a) in enumerate(labels):
        for start1, end1, y1, b in labels[i + 1 :]:
            if abs(y0 - y1) < 12:  # on one line: they do not overlap
                assert end0 <= start1 or end1 <= start0, (a, b)
    # Text takes the notebook theme's colour (light on a dark theme).
    assert "fill:var(--jp-ui-font-color1" in svg


def test_diff_rows_show_time_and_hide_the_rank():
    import polars as pl

    from widgets.diff_view import shown_rows

    frame = pl.DataFrame(
        {"lsn": [3], "ts": [1_767_226_071_604], "handler": ["flag"], "seq": [0], "_n": [0],
         "n": [7]}
    )  # fmt: skip
    shown = shown_rows(frame, rank="_n")
    assert shown.columns == ["time", "lsn", "seq", "handler", "n"]
    assert str(shown["time"][0]) == "2026-01-01 00:07:51.604000"
