"""What a notebook executed by a real kernel (nbclient) keeps in its saved outputs: a
``--background`` cell's static copy shows the run's final state, not "running", although its
run ended after the cell did; and the plan's hot keys and speedup charts have a static copy
too. Both are checked in the saved cells and in the page ``nbconvert --to html`` makes of the
notebook without its widget state (what a notebook viewer shows)."""

from __future__ import annotations

import json
import re

import nbformat
from nbclient import NotebookClient
from nbconvert import HTMLExporter

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

#: Counts messages per sender (a partitioned stage with hot senders), a little slowly, so that
#: the run surely ends after its cell has returned.
RULE = """\
from restream_kit import emit, on, state

sent = state.Counter()


@on("message")
def count(e):
    x = 0
    for i in range(300):
        x += i % 7
    sent[e.src] += 1 + x % 1
    if sent[e.src] == 50:
        emit("busy", sender=e.src)
"""


def executed(tmp_path, monkeypatch, cells: list[str]):
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / ".restream"))
    monkeypatch.setenv("RESTREAM_DISPLAY", "widgets")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
        store_widget_state=True,
    )  # fmt: skip
    client.execute()
    errors = [o for c in nb.cells for o in c.outputs if o.get("output_type") == "error"]
    assert not errors, errors
    return nb


def static_of(cell) -> str:
    return "\n".join(
        o["data"].get("text/html", "") for o in cell.outputs if WIDGET_VIEW in o.get("data", {})
    )


def test_a_background_cell_saves_its_final_state_and_the_plan_saves_its_charts(
    tmp_path, monkeypatch
):
    nb = executed(
        tmp_path,
        monkeypatch,
        [
            "%load_ext restream_kit",
            f"%%restream v1 --log social_small --background\n{RULE}",
            # Returns at once: the run is still going when the cell ends.
            "print(v1.status)",
            "v1.wait();",
        ],
    )
    assert "running" in nb.cells[2].outputs[0]["text"], nb.cells[2].outputs
    static = static_of(nb.cells[1])
    # The monitor and the diff as the run ended (sent after its cell, carried into the saved
    # notebook by the next cell that ran).
    assert "data-status='done'" in static and re.search(r"done in \d+\.\d\d s", static), static[
        :3000
    ]
    assert re.search(r"diff against [^<]+</b>: <span[^>]*>(identical|differs)", static), static[
        :3000
    ]
    texts = "\n".join(o["data"]["text/plain"] for o in nb.cells[1].outputs if "data" in o)
    assert "running" not in texts and "waiting" not in texts, texts
    # The plan's charts, folded under it, as images.
    assert "alt='hot keys of count' src='data:image/svg+xml;base64," in static, static[:3000]
    assert "alt='predicted speedup of v1' src='data:image/svg+xml;base64," in static

    # A notebook viewer (no widget state) shows the same.
    bare = nbformat.from_dict(json.loads(json.dumps(nb)))
    del bare.metadata["widgets"]
    page, _ = HTMLExporter().from_notebook_node(bare)
    assert re.search(r"done in \d+\.\d\d s", page), "no final monitor line in the page"
    assert re.search(r"alt=.hot keys of count.", page), "no hot keys"
    assert re.search(r"alt=.predicted speedup of v1.", page), "no speedup"
