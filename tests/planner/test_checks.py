"""Mistakes the log reveals are caught before any event is replayed (restream_kit.planner.checks).

A field no event has, a read of undeclared state and a kind the log lacks: found from the
program text and the log's columns, by ``check_against_log``, ``plan(program, log)``,
``replay`` (before Spark is even imported) and the command line (exit status 2).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest

import restream_kit as rk
from restream_kit.model.errors import CheckError, ProgramError
from restream_kit.planner.checks import check_against_log, check_program, kind_fields

HEADER = "from restream_kit import state, on, emit, schedule\n"


def program(body: str, name: str = "prog", future: str = "") -> rk.Program:
    return rk.Program.from_source(future + HEADER + textwrap.dedent(body), name=name)


@pytest.fixture(scope="module")
def log() -> rk.Log:
    rows = [
        {"ts": 1, "kind": "message", "src": 1, "dst": 2, "ip": "a", "has_email": True},
        {"ts": 2, "kind": "friendship", "src": 1, "dst": 3, "ip": None, "has_email": None},
        {"ts": 3, "kind": "message", "src": 3, "dst": 1, "ip": "b", "has_email": False},
    ]
    return rk.Log(rows)


TYPO = """
sent = state.Counter()

@on("message")
def count(e):
    sent[e.sendr] += 1
"""


def test_a_misspelt_field_names_handler_line_and_the_closest_column(log):
    with pytest.raises(CheckError) as caught:
        check_against_log(program(TYPO), log)
    err = caught.value
    assert isinstance(err, ProgramError)
    assert err.lineno == 7 and err.handler == "count"
    assert "handler 'count' reads e.sendr" in str(err)
    assert "did you mean e.src?" in str(err)
    assert str(err).startswith("<restream prog>:7: ")
    assert [f.code for f in err.findings] == ["unknown-field"]


def test_a_replay_with_a_misspelt_field_replays_no_event(log):
    seen = []
    with pytest.raises(CheckError, match="e.sendr"):
        rk.replay(program(TYPO), log, observer=seen.append)
    assert seen == []


def test_the_spark_engine_is_not_started_before_the_checks(root, tmp_path):
    # A fresh process: after the refused replay, pyspark has not even been imported.
    (tmp_path / "typo.py").write_text(HEADER + TYPO)
    script = (
        "import sys, restream_kit as rk\n"
        "try:\n"
        f"    rk.replay({str(tmp_path / 'typo.py')!r}, 'social_small', engine='spark')\n"
        "except rk.CheckError as e:\n"
        "    print('refused', e.lineno)\n"
        "print('pyspark' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=root, timeout=120
    )
    assert done.stdout.split() == ["refused", "7", "False"], done.stderr


def test_fields_read_in_a_helper_the_event_is_passed_to(log):
    p = program(
        """
        sent = state.Counter()

        def sender_of(ev):
            return ev.sender

        @on("message")
        def count(e):
            sent[sender_of(e)] += 1
        """
    )
    with pytest.raises(CheckError, match=r"\(in helper 'sender_of'\) reads ev.sender") as caught:
        check_against_log(p, log)
    assert caught.value.lineno == 6
    assert "did you mean ev.src?" in str(caught.value)


def test_a_field_of_a_kind_the_handler_does_not_receive_is_still_a_field(log):
    # ip is a column, but null in every friendship: a warning, the handler reads None.
    p = program(
        """
        seen = state.Counter()

        @on("friendship")
        def f(e):
            seen[e.ip] += 1
        """
    )
    findings = check_against_log(p, log)
    assert [(f.level, f.code, f.lineno) for f in findings] == [("warning", "null-field", 7)]


def test_scheduled_kinds_have_the_fields_of_their_schedule_calls(log):
    ok = program(
        """
        @on("message")
        def later(e):
            schedule("remind", at=e.ts + 10, who=e.src)

        @on("remind")
        def remind(e):
            emit("reminders", who=e.who, seq=e.seq)
        """
    )
    assert check_against_log(ok, log) == []
    bad = program(
        """
        @on("message")
        def later(e):
            schedule("remind", at=e.ts + 10, who=e.src)

        @on("remind")
        def remind(e):
            emit("reminders", who=e.whom)
        """
    )
    with pytest.raises(CheckError, match="reads e.whom.*did you mean e.who"):
        check_against_log(bad, log)


def test_with_require_kinds_false_a_missing_kind_is_one_warning_at_the_on_line(log):
    p = program(
        """
        n = state.Counter()

        @on("mesage")
        def count(e):
            n[e.src] += 1
        """
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = rk.replay(p, log, require_kinds=False)
    mine = [w for w in caught if issubclass(w.category, rk.RestreamWarning)]
    assert len(mine) == 1
    w = mine[0]
    assert (w.filename, w.lineno) == ("<restream prog>", 5)
    assert "no 'mesage' events in the log" in str(w.message)
    assert "the log's kinds: 'message', 'friendship'" in str(w.message)
    assert "did you mean 'message'?" in str(w.message)
    assert result.warnings == [str(w.message)]


def test_a_handler_that_would_never_run_is_an_error_by_default(log):
    """As on the command line and in the notebook: one error at the @on line, before any
    event; a handler whose other kinds the log has, or a scheduled kind, is no error."""
    p = program(
        """
        n = state.Counter()

        @on("mesage")
        def count(e):
            n[e.src] += 1
        """
    )
    seen = []
    with pytest.raises(CheckError) as caught:
        rk.replay(p, log, observer=seen.append)
    assert (caught.value.filename, caught.value.lineno, caught.value.handler) == (
        "<restream prog>",
        5,
        "count",
    )
    assert seen == []  # before any event
    message = str(caught.value)
    assert "no 'mesage' events in the log: handler(s) count will never run" in message
    assert "the log's kinds: 'message', 'friendship'" in message
    assert "did you mean 'message'?" in message
    with pytest.raises(CheckError, match="will never run"):
        rk.plan(p, log, require_kinds=True)
    with pytest.raises(CheckError, match="will never run"):
        rk.sweep(p, log)

    partly = program(
        """
        n = state.Counter()

        @on("message", "mesage")
        def count(e):
            n[e.src] += 1

        @on("message")
        def later(e):
            schedule("remind", at=e.ts + 10, who=e.src)

        @on("remind")
        def remind(e):
            emit("reminders", who=e.who)
        """
    )
    findings = check_against_log(partly, log, require_kinds=True)
    assert [(f.level, f.code) for f in findings] == [("warning", "missing-kind")]
    assert "handler(s) count run on their other kinds only" in findings[0].message


def test_replay_check_false_leaves_the_check_to_the_caller(log):
    p = program(
        """
        n = state.Counter()

        @on("mesage")
        def count(e):
            n[e.src] += 1
        """
    )
    findings = check_against_log(p, log)
    assert [f.code for f in findings] == ["missing-kind"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rk.replay(p, log, check=False)
    assert not [w for w in caught if issubclass(w.category, rk.RestreamWarning)]


UNDECLARED = """
sent = state.Counter()

@on("message")
def count(e):
    sent[e.src] += 1
    if totals[e.src] > 3:
        emit("busy", who=e.src)
"""


def test_a_read_of_undeclared_state_is_refused_before_the_replay(log):
    seen = []
    with pytest.raises(CheckError, match="reads 'totals', which is undeclared state") as caught:
        rk.replay(program(UNDECLARED), log, observer=seen.append)
    assert caught.value.lineno == 8 and caught.value.handler == "count"
    assert seen == []
    # Without a log too: planning refuses it.
    with pytest.raises(CheckError, match="totals"):
        rk.plan(program(UNDECLARED))


@pytest.mark.parametrize(
    "use, name",
    [
        ("x = sent_total.get(e.src)", "sent_total"),
        ("x = e.src in sent_totl", "sent_totl"),
        ("sent_totls.add(e.src, 1)", "sent_totls"),
    ],
)
def test_get_in_and_state_methods_of_undeclared_names_are_refused(use, name):
    p = program(
        f"""
        sent_totals = state.Counter()

        @on("message")
        def count(e):
            {use}
        """
    )
    with pytest.raises(CheckError, match=f"reads '{name}'.*did you mean 'sent_totals'"):
        check_program(p)


def test_a_name_nothing_defines_is_refused_with_the_closest_name():
    p = program(
        """
        LIMIT = 3
        seen = state.Counter()

        @on("message")
        def count(e):
            seen[e.src] += 1
            if seen[e.src] > LIMT:
                emit("busy", who=e.src)
        """
    )
    with pytest.raises(CheckError, match="handler 'count' uses 'LIMT', which is not defined; "
                       "did you mean 'LIMIT'") as caught:  # fmt: skip
        check_program(p)
    assert caught.value.lineno == 9 and caught.value.findings[0].code == "undefined-name"


def test_locals_closures_and_module_names_are_not_state(log):
    p = program(
        """
        import collections
        LIMITS = {1: 5}
        seen = state.Counter()

        def helper(k):
            table = {k: 1}
            return table[k] + LIMITS.get(k, 0)

        @on("message")
        def count(e: Event) -> None:  # postponed annotations are never evaluated
            pairs = [(a, b) for a, b in [(1, 2)]]
            lookup = {p[0]: p[1] for p in pairs}
            f = lambda d: d[1]  # noqa: E731
            try:
                x = lookup[e.src]
            except KeyError as err:
                x = err.args[0] if err.args else 0
            seen[e.src] += helper(e.src) + f([0, 1]) + x + len(collections.Counter([1]))
            if e.src in LIMITS:
                emit("out", n=seen[e.src])
        """,
        future="from __future__ import annotations\n",
    )
    assert check_against_log(p, log) == []


def test_plan_with_a_log_refuses_a_field_no_event_has(log):
    with pytest.raises(CheckError, match="e.sendr"):
        rk.plan(program(TYPO), log)


def test_plan_with_a_log_lists_a_missing_kind_among_its_warnings(log):
    p = program(
        """
        n = state.Counter()

        @on("mesage")
        def count(e):
            n[e.src] += 1
        """
    )
    plan = rk.plan(p, log)
    missing = [w for w in plan.warnings if w.code == "missing-kind"]
    assert len(missing) == 1 and missing[0].lineno == 5


def test_kind_fields_are_the_columns_with_a_value_per_kind(log):
    assert kind_fields(log) == {
        "message": {"src", "dst", "ip", "has_email"},
        "friendship": {"src", "dst"},
    }


@pytest.mark.parametrize(
    "example, sample",
    [
        ("antispam", "social_small"),
        ("iot", "iot_small"),
        ("streamscope", "streamscope_small"),
        ("adclicks", "adclicks_small"),
    ],
)
def test_the_examples_pass_the_checks_on_their_sample_logs(root, example, sample):
    findings = check_against_log(rk.Program.from_file(root / "examples" / f"{example}.py"), sample)
    assert [f for f in findings if f.level == "error"] == []
    assert [f.code for f in findings if f.code == "unknown-field"] == []


def test_command_line_plan_and_replay_exit_2_on_a_field_no_event_has(root, tmp_path):
    prog = tmp_path / "typo.py"
    prog.write_text(HEADER + TYPO)
    for command in ("plan", "replay"):
        done = subprocess.run(
            [sys.executable, "-m", "restream_kit", command, str(prog), "--log", "social_small"],
            capture_output=True,
            text=True,
            cwd=root,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert lines[-1] == (
            f"error: {prog}:7: handler 'count' reads e.sendr, but no 'message' event has a field "
            "'sendr' (fields: dst, has_email, ip, src); did you mean e.src?"
        )
        assert "Traceback" not in done.stderr
