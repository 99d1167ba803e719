"""The planner: analysis of handlers, the lint, stages and modes, golden plans of the example
catalogue, the data critical path on power-law logs, and the causal check that no serial
replay has a longer read-after-write chain than the plan allows."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import restream_kit as rk
from restream_kit import Log, Program, ProgramError
from restream_kit.compiler.compile import compile_program
from restream_kit.planner import compile_key, plan
from restream_kit.planner.causal import longest_chain
from restream_kit.planner.render import plan_text
from restream_kit.runtime import SerialRuntime, run_events

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"


def _regenerate_module():
    spec = importlib.util.spec_from_file_location("golden_regenerate", GOLDEN / "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REGEN = _regenerate_module()
CATALOGUE = REGEN.catalogue()


def src(text: str, name: str = "t") -> Program:
    """A program from source whose first line (the imports) is flush and the rest indented."""
    head, _, rest = text.partition("\n")
    return Program.from_source(head + "\n" + textwrap.dedent(rest), name=name)


def accesses(p, handler: str) -> list[tuple]:
    return [(a.state, a.op, a.key, a.event_key) for a in p.handler(handler).accesses]


def stage(p, handler: str):
    return p.stage_of(handler)


# -- golden plans ---------------------------------------------------------------------------


def test_catalogue_has_the_required_programs():
    assert len(CATALOGUE) >= 12
    for name in (
        "antispam",
        "five_rules",
        "cycle_same_key",
        "cycle_different_keys",
        "read_modify_write",
        "key_from_read",
        "stateless_filter",
        "helpers",
        "nondeterministic",
        "streamscope",
        "adclicks",
        "iot",
        "flights",
    ):
        assert name in CATALOGUE


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_golden_plan(name):
    golden = json.loads((GOLDEN / "plans" / f"{name}.json").read_text())
    assert REGEN.golden_of(CATALOGUE[name]) == golden, (
        f"the plan of {name} changed: run python tests/golden/regenerate.py and review the diff"
    )


def test_antispam_plan():
    p = plan(ROOT / "examples" / "antispam.py")
    edges = {(e.src, e.dst) for e in p.edges}
    assert edges == {("befriend", "tally_sender"), ("tally_sender", "flag"), ("tally_ip", "flag")}
    assert {e.state for e in p.edges if (e.src, e.dst) == ("befriend", "tally_sender")} == {
        "friends"
    }
    assert all(s.mode != "sequential" for s in p.stages)
    assert [s.name for s in p.stages] == ["befriend", "tally_sender", "tally_ip", "flag"]
    assert p.critical_path == ("befriend", "tally_sender", "flag")
    d = p.to_dict()
    assert [h["name"] for h in d["handlers"]] == ["befriend", "tally_sender", "tally_ip", "flag"]
    assert ["befriend", "tally_sender", "friends"] in d["edges"]
    assert {"handlers", "mode", "partition_key"} <= set(d["stages"][0])


def test_nondeterministic_example_is_rejected_with_its_line():
    with pytest.raises(ProgramError) as err:
        plan(CATALOGUE["nondeterministic"])
    assert err.value.lineno == 10
    assert "random.random()" in str(err.value)
    assert ":10:" in str(err.value)


def test_cycle_same_key_is_fused_and_partitioned():
    p = plan(CATALOGUE["cycle_same_key"])
    s = stage(p, "pay")
    assert s.handlers == ("pay", "hold")
    assert s.mode == "partitioned"
    assert s.partition_key == "e.account"  # `ev.account` in hold, canonicalised


def test_cycle_different_keys_is_sequential_and_names_the_read():
    p = plan(CATALOGUE["cycle_different_keys"])
    s = stage(p, "vote")
    assert s.handlers == ("vote", "promote")
    assert s.mode == "sequential"
    assert "standing[e.src]" in s.reason and "vote" in s.reason and "line 23" in s.reason


def test_modes_of_the_catalogue():
    expect = {
        "read_modify_write": {"new_country": ("partitioned", "e.user")},
        "key_from_read": {"charge": ("stateless", None), "over_quota": ("broadcast-read", None)},
        "stateless_filter": {"large_trades": ("stateless", None)},
        "helpers": {"tally": ("stateless", None), "touch": ("partitioned", "e.src")},
        "session_windows": {"click": ("partitioned", "e.user")},
        "tumbling_window": {"close": ("partitioned", "e.symbol")},
        "global_total": {
            "running_total": ("sequential", None),
            "tally_account": ("stateless", None),
        },
        "five_rules": {
            "score": ("partitioned", "e.src"),
            "track_recipients": ("partitioned", "(e.src, e.dst)"),
        },
        "rate_limit": {"limit": ("partitioned", "e.src")},
    }
    for name, handlers in expect.items():
        p = plan(CATALOGUE[name])
        for handler, (mode, key) in handlers.items():
            s = stage(p, handler)
            assert (s.mode, s.partition_key) == (mode, key), (name, handler, s)


# -- analysis -------------------------------------------------------------------------------

HEAD = "from restream_kit import emit, on, schedule, state\n"


def test_aliases_comprehensions_conditionals_in_and_get():
    p = plan(
        src(
            HEAD
            + """
        seen = state.Map(default=False)
        counts = state.Counter()

        @on("a")
        def h(ev):
            m = counts
            if ev.x > 0:
                m[ev.src] += 1
            else:
                total = sum(counts[u] for u in ev.users)
            if ev.src in seen and seen.get(ev.dst):
                emit("out", x=[counts[k] for k in (ev.src,)])
    """
        )
    )
    got = accesses(p, "h")
    assert ("counts", "merge", "e.src", True) in got  # through the alias, arg renamed to e
    assert ("counts", "read", "u", False) in got  # comprehension over the event's list
    assert ("seen", "read", "e.src", True) in got  # `in`
    assert ("seen", "read", "e.dst", True) in got  # .get
    assert ("counts", "read", "k", False) in got


def test_same_key_written_two_ways_compares_equal():
    p = plan(
        src(
            HEAD
            + """
        last = state.Map()

        @on("a")
        def h(event):
            k = event.user
            before = last[k]
            last[event.user] = event.ts
    """
        )
    )
    assert {a.key for a in p.handler("h").accesses} == {"e.user"}
    assert stage(p, "h").mode == "partitioned"


def test_tuple_unpacking_and_walrus_locals_are_substituted():
    p = plan(
        src(
            HEAD
            + """
        m = state.Map()

        @on("a")
        def h(e):
            a, b = e.src, e.dst
            if (k := (a, b)) in m:
                m[a, b] = 1
    """
        )
    )
    assert {a.key for a in p.handler("h").accesses} == {"(e.src, e.dst)"}
    assert stage(p, "h").partition_key == "(e.src, e.dst)"


def test_helpers_are_followed_through_calls():
    p = plan(CATALOGUE["helpers"])
    tally = p.handler("tally").accesses
    assert [(a.state, a.op, a.key, a.via) for a in tally] == [("counts", "merge", "e.src", "bump")]
    touch = p.handler("touch").accesses
    assert ("last_seen", "read", "e.src", "seen_recently") in [
        (a.state, a.op, a.key, a.via) for a in touch
    ]


def test_nested_helpers_are_followed():
    p = plan(
        src(
            HEAD
            + """
        counts = state.Counter()

        def inner(key):
            counts[key] += 1

        def outer(ev):
            inner((ev.a, ev.b))

        @on("a")
        def h(e):
            outer(e)
    """
        )
    )
    (a,) = p.handler("h").accesses
    assert (a.state, a.op, a.key, a.event_key, a.via) == (
        "counts",
        "merge",
        "(e.a, e.b)",
        True,
        "inner",
    )


def test_state_passed_as_an_argument_is_rejected_at_load():
    with pytest.raises(ProgramError, match=r"state 'counts' is passed to inner\(\)"):
        src(
            HEAD
            + """
        counts = state.Counter()

        def inner(m, key):
            m[key] += 1

        @on("a")
        def h(e):
            inner(counts, e.a)
    """
        )


@pytest.mark.parametrize(
    "body, words",
    [
        (
            """
        def walk(k):
            if k > 0:
                counts[k] += 1
                walk(k - 1)

        @on("a")
        def h(e):
            walk(e.x)
        """,
            "recursive",
        ),
        (
            """
        def bump(k):
            counts[k] += 1

        @on("a")
        def h(e):
            list(map(bump, e.keys))
        """,
            "passed as a value",
        ),
        (
            """
        def bump(k, n):
            counts[k] += n

        @on("a")
        def h(e):
            args = (e.x, 1)
            bump(*args)
        """,
            "*args",
        ),
        (
            """
        class Bumper:
            def go(self, k):
                counts[k] += 1

        bumper = Bumper()

        @on("a")
        def h(e):
            bumper.go(e.x)
        """,
            "not a plain function",
        ),
    ],
)
def test_unfollowable_helpers_are_rejected(body, words):
    program = src(HEAD + "counts = state.Counter()\n" + textwrap.dedent(body))
    with pytest.raises(ProgramError) as err:
        plan(program)
    assert words in str(err.value)
    assert err.value.lineno is not None


def test_pure_helpers_need_no_following():
    p = plan(
        src(
            HEAD
            + """
        counts = state.Counter()

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        @on("a")
        def h(e):
            counts[e.x] += fib(5)
            emit("o", v=sorted(e.xs, key=abs))
    """
        )
    )
    assert accesses(p, "h") == [("counts", "merge", "e.x", True)]


def test_emits_and_schedules_are_listed():
    p = plan(CATALOGUE["session_windows"])
    assert p.handler("click").schedules == ("session_check",)
    assert p.handler("close_if_idle").emits == ("sessions",)
    assert ["click", "close_if_idle", "schedule:session_check"] in p.to_dict()["edges"]


def test_merges_without_reads_make_no_cycle():
    p = plan(
        src(
            HEAD
            + """
        c = state.Counter()

        @on("a")
        def up(e):
            c[e.x] += 1

        @on("a")
        def down(e):
            c[e.x] -= 1
            if c[e.x] > 3:
                emit("o", x=e.x)
    """
        )
    )
    assert [(e.src, e.dst) for e in p.edges] == [("up", "down")]
    assert [s.name for s in p.stages] == ["up", "down"]
    assert stage(p, "up").mode == "stateless"
    assert stage(p, "down").mode == "partitioned"


def test_whole_state_and_constant_keys_are_sequential():
    p = plan(
        src(
            HEAD
            + """
        users = state.Map()
        totals = state.Counter()

        @on("a")
        def count_users(e):
            users[e.user] = True
            if len(users) > 10:
                emit("many", n=len(users))

        @on("a")
        def grand_total(e):
            totals["all"] += e.amount
            if totals["all"] > 100:
                emit("big")
    """
        )
    )
    s = stage(p, "count_users")
    assert s.mode == "sequential" and "users is used whole" in s.reason
    s = stage(p, "grand_total")
    assert s.mode == "sequential" and "constant key 'all'" in s.reason


def test_self_scheduling_without_the_key_is_sequential():
    p = plan(
        src(
            HEAD
            + """
        last = state.Map()

        @on("tick")
        def tick(e):
            if last[e.user] is None:
                last[e.user] = e.ts
            schedule("tick", at=e.ts + 1000, other=e.user)
    """
        )
    )
    s = stage(p, "tick")
    assert s.mode == "sequential" and "schedules 'tick'" in s.reason


def test_unbounded_and_never_written_state_warn():
    p = plan(
        src(
            HEAD
            + """
        by_time = state.Map()
        ghost = state.Map()

        @on("a")
        def h(e):
            by_time[e.ts] = e.x
            if ghost[e.x]:
                emit("o")
    """
        )
    )
    codes = {w.code for w in p.warnings}
    assert {"unbounded-state", "never-written"} <= codes


def test_value_reads_are_event_keyed_upstream():
    p = plan(
        src(
            HEAD
            + """
        limit = state.Value(default=10)

        @on("config")
        def configure(e):
            limit.value = e.limit

        @on("a")
        def check(e):
            if e.x > limit.value:
                emit("over", x=e.x)
    """
        )
    )
    assert stage(p, "check").mode == "stateless"
    assert stage(p, "check").reads_upstream[0].state == "limit"


# -- the lint -------------------------------------------------------------------------------

LINT_CASES = [
    ("import random\n", "if random.random() < .5:\n        emit('o')", "random.random"),
    ("import time\n", "emit('o', t=time.time())", "time.time"),
    ("from datetime import datetime\n", "emit('o', t=datetime.now())", "datetime.datetime.now"),
    ("import uuid\n", "emit('o', id=str(uuid.uuid4()))", "uuid.uuid4"),
    ("", "emit('o', text=open('/etc/hostname').read())", "open()"),
    ("import os\n", "emit('o', home=os.environ['HOME'])", "os.environ"),
    ("COUNT = 0\n", "global COUNT\n    COUNT = COUNT + 1", "global"),
    ("SEEN = []\n", "SEEN.append(e.x)", "SEEN"),
]


@pytest.mark.parametrize("prelude, line, words", LINT_CASES)
def test_lint_rejects_with_the_line(prelude, line, words):
    text = f"{HEAD}{prelude}\n@on('a')\ndef h(e):\n    x = 1\n    {line}\n"
    program = Program.from_source(text, name="lint")
    expected = text.splitlines().index(f"    {line.splitlines()[0]}") + 1
    with pytest.raises(ProgramError) as err:
        plan(program)
    assert err.value.lineno == expected, str(err.value)
    assert words in str(err.value)


def test_lint_follows_helpers_and_names_them():
    program = src(
        HEAD
        + """
        import time

        def stamp():
            return time.monotonic()

        @on("a")
        def h(e):
            emit("o", t=stamp())
    """
    )
    with pytest.raises(ProgramError) as err:
        plan(program)
    assert "helper 'stamp'" in str(err.value) and err.value.lineno == 6


def test_opting_out_turns_errors_into_warnings():
    p = plan(CATALOGUE["nondeterministic"], allow_nondeterminism=True)
    (w,) = [w for w in p.warnings if w.code == "randomness"]
    assert w.lineno == 10 and w.handler == "sample"


def test_hash_and_in_place_state_changes_only_warn():
    p = plan(
        src(
            HEAD
            + """
        lists = state.Map(default=())

        @on("a")
        def h(e):
            lists[e.x].append(e.y)
            emit("o", bucket=hash(e.name) % 8)
    """
        )
    )
    assert {"hash", "state-in-place"} <= {w.code for w in p.warnings}


def test_local_objects_may_be_mutated():
    p = plan(
        src(
            HEAD
            + """
        @on("a")
        def h(e):
            out = []
            out.append(e.x)
            d = {}
            d["k"] = 1
            emit("o", n=len(out))
    """
        )
    )
    assert p.warnings == ()


# -- the plan value -------------------------------------------------------------------------


def test_plan_is_frozen_json_and_keys_compile():
    p = plan(CATALOGUE["tumbling_window"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.program = "x"
    assert isinstance(p.stages, tuple) and isinstance(p.edges, tuple)
    json.loads(json.dumps(p.to_dict()))
    program = Program.from_file(CATALOGUE["tumbling_window"])
    s = stage(p, "add_trade")
    key = p.key_function(s.name, program)
    Event = Log([{"ts": 1, "kind": "trade", "symbol": "X", "qty": 1}]).event_type()
    assert key(Event(lsn=0, ts=1, kind="trade", symbol="ACME", qty=3)) == "ACME"
    window = compile_key("(e.symbol, e.ts - e.ts % WIDTH + WIDTH)", program)
    assert window(Event(lsn=0, ts=61_000, kind="trade", symbol="A", qty=1)) == ("A", 120_000)


def test_plan_text_is_a_readable_summary():
    text = plan_text(plan(CATALOGUE["cycle_different_keys"]))
    for words in (
        "Plan of cycle_different_keys",
        "Stages, in order",
        "sequential",
        "Critical path: seed -> vote -> promote",
        "standing[e.src]",
    ):
        assert words in text


# -- the data critical path -----------------------------------------------------------------


def power_law_log(events: int, alpha: float, *, users: int = 1_000, seed: int = 3) -> pa.Table:
    """Messages whose sender has activity rank r with probability proportional to r^-alpha."""
    rng = np.random.default_rng(seed)
    weights = np.arange(1, users + 1, dtype=float) ** -alpha
    src_ = rng.choice(users, size=events, p=weights / weights.sum())
    return pa.table({
        "ts": np.cumsum(rng.integers(0, 3_000, events)),
        "kind": np.where(rng.random(events) < 0.05, "friendship", "message"),
        "src": src_,
        "dst": rng.integers(0, users, events),
        "ip": src_ % 37,
        "has_email": rng.random(events) < 0.1,
    })  # fmt: skip


def test_speedup_bound_falls_as_activity_concentrates():
    speedups, shares = [], []
    for alpha in (1.1, 1.4, 1.7, 2.0):
        p = plan(CATALOGUE["rate_limit"], Log(power_law_log(20_000, alpha), cache=False))
        load = p.data.per_stage[0]
        assert load.mode == "partitioned" and load.heaviest_key == "0"
        shares.append(load.heaviest_share)
        speedups.append(dict(p.data.predicted_speedup)[64])
    assert shares == sorted(shares) and speedups == sorted(speedups, reverse=True)
    assert speedups[0] > 2 * speedups[-1]


def test_data_path_shape():
    p = plan(CATALOGUE["five_rules"], Log(power_law_log(5_000, 1.5), cache=False))
    d = p.data
    assert [w for w, _ in d.predicted_speedup] == [1, 2, 4, 8, 16, 32, 64]
    assert d.predicted_speedup[0][1] == pytest.approx(1.0)
    ups = [s for _, s in d.predicted_speedup]
    assert ups == sorted(ups) and all(s <= w + 1e-9 for w, s in d.predicted_speedup)
    score = next(s for s in d.per_stage if s.stage == "score")
    assert score.hot_keys[0][0] == score.heaviest_key and len(score.hot_keys) == 10
    assert score.work == sum(
        1 for k in power_law_log(5_000, 1.5)["kind"].to_pylist() if k == "message"
    )
    out = p.to_dict()
    assert out["hot_keys"]["score"][0][0] == "0" and out["predicted_speedup"][0] == [1, 1.0]
    assert "Data critical path" in plan_text(p)


def test_python_key_evaluation_matches_the_grouped_one():
    table = power_law_log(3_000, 1.3)
    grouped = plan(CATALOGUE["rate_limit"], Log(table, cache=False)).data.per_stage[0]
    program = src(
        HEAD
        + """
        in_window = state.Counter()

        @on("message")
        def limit(e):
            in_window[e.src + 0] += 1
            if in_window[e.src + 0] > 10:
                emit("o")
    """
    )
    evaluated = plan(program, Log(table, cache=False)).data.per_stage[0]
    assert (evaluated.heaviest_key, evaluated.keys, evaluated.hot_keys) == (
        grouped.heaviest_key,
        grouped.keys,
        grouped.hot_keys,
    )


def test_unit_weighting_when_the_sample_fails():
    program = src(
        HEAD
        + """
        m = state.Map()

        @on("message")
        def h(e):
            m[e.src] = 1 / (e.src - e.src)
            if m[e.src]:
                emit("o")
    """
    )
    d = plan(program, Log(power_law_log(500, 1.5), cache=False)).data
    assert d.weighting == "unit" and "ZeroDivisionError" in d.notes[0]
    assert d.per_stage[0].cost == d.per_stage[0].work


# -- the causal check -----------------------------------------------------------------------

COLUMNS = (
    "src",
    "dst",
    "ip",
    "user",
    "account",
    "team",
    "symbol",
    "country",
    "amount",
    "qty",
    "price",
    "end",
    "limit",
    "x",
)
CAUSAL_PROGRAMS = [
    "antispam",
    "five_rules",
    "cycle_same_key",
    "cycle_different_keys",
    "read_modify_write",
    "key_from_read",
    "helpers",
    "session_windows",
    "tumbling_window",
    "global_total",
    "rate_limit",
    "stateless_filter",
]


def log_kinds(path: Path) -> list[str]:
    p = plan(path)
    scheduled = {k for h in p.handlers for k in h.schedules}
    return [k for h in p.handlers for k in h.kinds if k not in scheduled]


@st.composite
def small_logs(draw, kinds: list[str]):
    n = draw(st.integers(1, 60))
    rows = []
    ts = 0
    for _ in range(n):
        ts += draw(st.sampled_from([0, 1, 500, 60_000, 3_600_000, 90_000_000]))
        row = {"ts": ts, "kind": draw(st.sampled_from(kinds))}
        for col in COLUMNS:
            row[col] = draw(st.integers(0, 3))
        row["has_email"] = draw(st.booleans())
        row["mentions"] = draw(st.lists(st.integers(0, 3), max_size=3))
        rows.append(row)
    return rows


@pytest.mark.parametrize("name", CAUSAL_PROGRAMS)
def test_true_chain_never_exceeds_the_plan_bound(name):
    path = CATALOGUE[name]
    kinds = sorted(set(log_kinds(path)))

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    @given(small_logs(kinds))
    def check(rows):
        log = Log(rows, cache=False)
        p = plan(path, log)
        chain = longest_chain(path, log)
        assert chain.longest <= p.data.chain_bound, (chain, p.data)

    check()


def test_true_chain_on_power_law_logs():
    for name in ("rate_limit", "five_rules", "antispam"):
        log = Log(power_law_log(4_000, 1.6), cache=False)
        p = plan(CATALOGUE[name], log)
        chain = longest_chain(CATALOGUE[name], log)
        assert 1 <= chain.longest <= p.data.chain_bound
    # A sequential stage: the chain really runs through the whole log.
    log = Log(
        [{"ts": i, "kind": "payment", "account": i % 3, "amount": 5} for i in range(200)],
        cache=False,
    )
    p = plan(CATALOGUE["global_total"], log)
    assert longest_chain(CATALOGUE["global_total"], log).longest == 200 == p.data.chain_bound


def test_the_causal_check_has_teeth():
    """A relay that reads one key and writes another: the true chain runs through every event,
    twice as long as any one key's share, so a plan partitioning it by either key would be
    caught; the planner makes it sequential and its bound holds."""
    program = src(
        HEAD
        + """
        hops = state.Map(default=0)

        @on("pass")
        def relay(e):
            hops[e.dst] = hops[e.src] + 1
    """
    )
    log = Log(
        [{"ts": i, "kind": "pass", "src": i % 2, "dst": (i + 1) % 2} for i in range(100)],
        cache=False,
    )
    p = plan(program, log)
    chain = longest_chain(program, log)
    assert p.stages[0].mode == "sequential"
    assert chain.longest == 100 == p.data.chain_bound
    assert chain.longest > 50  # the events of the busiest key, src or dst


@pytest.mark.parametrize("alias", [False, True])
def test_the_causal_check_resolves_aliases_like_the_compiler(alias):
    """``m = counts; m[k] += 1`` is a merge as much as ``counts[k] += 1``: the causal check
    resolves the alias by the compiler's rules, so no chain of reads is seen where none is."""
    target = "m" if alias else "counts"
    program = src(
        HEAD
        + f"""
        counts = state.Map(default=0)

        @on("pay")
        def count(e):
            m = counts
            {target}[e.src] += 1
    """
    )
    log = Log([{"ts": i, "kind": "pay", "src": 0} for i in range(50)], cache=False)
    assert accesses(plan(program), "count") == [("counts", "merge", "e.src", True)]
    assert longest_chain(program, log).longest == 1 == plan(program, log).data.chain_bound


@pytest.mark.parametrize("name", ["five_rules", "session_windows", "tumbling_window", "helpers"])
def test_the_planners_replays_run_the_serial_engines_runtime(name):
    rows = []
    rng = np.random.default_rng(5)
    kinds = log_kinds(CATALOGUE[name])
    ts = 0
    for _ in range(400):
        ts += int(rng.choice([0, 1_000, 600_000, 3_600_000]))
        row = {"ts": ts, "kind": str(rng.choice(kinds))}
        row.update({c: int(rng.integers(0, 5)) for c in COLUMNS})
        row["has_email"] = bool(rng.random() < 0.3)
        rows.append(row)
    log = Log(rows, cache=False)
    program = Program.from_file(CATALOGUE[name])
    result = rk.replay(program, log)
    # The planner's replays (cost samples, the causal check) drive the serial engine's runtime
    # with run_events, which wraps every handler run: the rows are the serial engine's.
    rt = SerialRuntime()
    compiled = compile_program(program, rt)
    runs = []
    events = itertools.chain.from_iterable(log.iter_events())
    run_events(compiled.handlers_by_kind(), rt, events, lambda n, fn, ev, _s: runs.append(fn(ev)))
    assert set(rt.rows) == set(result.tables)
    for name, table in result.tables.items():
        want = [
            (r.pop("lsn"), r.pop("ts"), r.pop("handler"), r.pop("seq"), r)
            for r in table.to_pylist()
        ]
        assert rt.rows[name] == want, name
    assert longest_chain(program, log).runs == len(runs)


# -- figures and the benchmark ---------------------------------------------------------------


def test_figures():
    figures = pytest.importorskip("widgets.plan_figures")
    p = plan(CATALOGUE["five_rules"], Log(power_law_log(3_000, 1.5), cache=False))
    dag = figures.dag_figure(p)
    names = {t.name for t in dag.data}
    # A stateless stage that writes state is labelled "per event" (it writes, so not stateless).
    assert {"per event", "partitioned", "state", "critical path"} <= names
    assert any("partitioned" in (a.text or "") for a in dag.layout.annotations)
    hot = figures.hot_keys_figure(p)
    assert len(hot.data) == 2
    speed = figures.speedup_figure(p, {1: 1.0, 2: 1.7})
    assert [t.name for t in speed.data][-1] == "measured"
    assert figures.hot_keys_figure(plan(CATALOGUE["antispam"])).layout.annotations


def test_plan_bench_small():
    spec = importlib.util.spec_from_file_location("plan_bench", ROOT / "bench" / "plan_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.run(events=50_000)
    assert out["ok"] and out["stages"] == 4 and out["speedup_64"] > 1


@pytest.mark.slow
def test_plan_bench_one_million_events_under_three_seconds():
    spec = importlib.util.spec_from_file_location("plan_bench", ROOT / "bench" / "plan_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.run(events=1_000_000)
    assert out["plan_s"] < 3.0, out
