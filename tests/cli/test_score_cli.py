"""``restream score`` and ``--labels`` on ``replay``, ``diff`` and ``sweep`` (issue 35), run as
a user runs them: the scores they print are those of ``rk.score`` on the same outputs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import restream_kit as rk
from restream_kit.cli import main
from restream_kit.iterate.score import score

LABELS = "social_small_labels"

#: The sample rule with a threshold: flag only after this many messages to strangers.
TUNABLE = (
    rk.sample_program("antispam")
    .read_text()
    .replace("from restream_kit import emit, on, state", "from restream_kit import emit, on, param, state")
    .replace("ip_emails = state.Counter()", 'ip_emails = state.Counter()\nmin_strangers = param("min_strangers", 1)')
    .replace("    if to_strangers[e.src] > 2", "    if to_strangers[e.src] >= min_strangers and to_strangers[e.src] > 2")
)  # fmt: skip


def restream(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "restream_kit", *args], capture_output=True, text=True, timeout=300
    )


def _json(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_replay_score_and_diff_print_and_carry_the_scores(in_tmp, capsys):
    program = str(rk.sample_program("antispam"))
    (in_tmp / "v2.py").write_text(TUNABLE)
    base = ["--log", "social_small", "--quiet", "--labels", LABELS, "--by", "sender"]
    out = _json(restream("replay", program, *base, "--out", "v1", "--window", "10min", "--json"))
    expected = score(in_tmp / "v1", LABELS, by="sender", window="10min")["spam"]
    got = out["scores"]["tables"]["spam"]
    assert (got["tp"], got["fp"], got["fn"]) == (expected.tp, expected.fp, expected.fn)
    assert got["timely"] == expected.timely and got["buckets"][0]["alerts"] > 0
    # The text forms in this process (the JSON ones above and below go through the command).
    assert main(["replay", "v2.py", *base, "--param", "min_strangers=3", "--name", "v2"]) == 0
    assert "spam by sender: precision " in capsys.readouterr().out.splitlines()[-1]
    # score: a --out directory or a catalog run; one line per table, or JSON.
    assert main(["score", "v1", "--labels", LABELS, "--by", "sender"]) == 0
    plain = score(in_tmp / "v1", LABELS, by="sender")["spam"]
    assert capsys.readouterr().out.strip() == plain.summary()
    v2 = _json(restream("score", "v2", "--labels", LABELS, "--by", "sender", "--json", "--keys"))
    v2_spam = v2["tables"]["spam"]
    assert len(v2_spam["keys"]) == v2_spam["tp"] + v2_spam["fp"] + v2_spam["fn"]
    # diff: both sides' scores, and the keys that changed class.
    both = _json(restream("diff", "v2", "v1", "--by", "sender", "--labels", LABELS, "--json"))
    scores = both["scores"]
    assert scores["a"]["tables"]["spam"]["tp"] == v2_spam["tp"]
    assert scores["b"]["tables"]["spam"]["tp"] == expected.tp
    missed = [k for k in scores["changed_keys"] if k["change"] == "newly missed"]
    assert len(missed) == expected.tp - v2_spam["tp"] > 0
    assert main(["diff", "v2", "v1", "--by", "sender", "--labels", LABELS]) == 1  # they differ
    text = capsys.readouterr().out
    assert "keys that changed class in v2" in text and "newly missed" in text


def test_sweep_scores_every_variant_and_marks_the_pareto_front(in_tmp, capsys):
    (in_tmp / "v2.py").write_text(TUNABLE)
    args = ["sweep", "v2.py", "--log", "social_small", "--param", "min_strangers=1,2,8"]
    out = _json(restream(*args, "--labels", LABELS, "--by", "sender", "--json"))
    variants = out["variants"]
    recalls = [v["scores"]["spam"]["recall"] for v in variants]
    assert recalls == sorted(recalls, reverse=True) and recalls[0] > recalls[-1]
    assert variants[0]["scores"]["spam"]["pareto"]  # the highest recall is never dominated
    assert main([*args, "--labels", LABELS, "--by", "sender"]) == 0
    text = capsys.readouterr().out
    assert text.count("    spam: precision ") == 3, text


@pytest.mark.parametrize(
    "args, message",
    [
        (["score", "v1", "--labels", LABELS], "error: --labels needs --by FIELD[,FIELD]"),
        (["score", "v1", "--by", "sender"], "error: score needs --labels FILE"),
        (["score", "nope", "--labels", LABELS, "--by", "sender"], "no successful run called"),
        (["score", ".", "--labels", "no.csv", "--by", "sender"], "error: labels no.csv: no such"),
    ],
)
def test_bad_score_input_is_one_line_and_exit_2(in_tmp, capsys, args, message):
    assert main(args) == 2  # in this process: the subprocess tests above cover the wiring
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1, err
