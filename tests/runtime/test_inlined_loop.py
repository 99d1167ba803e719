"""The serial engine's hot loop inlines a handler's body only where that cannot change what it
does: a local read where some path has not assigned it would, inlined, see the previous
event's value instead of raising ``UnboundLocalError``.

The oracle for inlining is the guarded loop (``on_error="quarantine"``), which calls every
handler as a function: generated handler bodies must give the same rows, state and first
error either way.
"""

from __future__ import annotations

import ast
import textwrap

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import restream_kit as rk
from restream_kit.compiler.inline import build_runner

HEADER = """\
from restream_kit import emit, on, state

total = state.Counter()
"""


def inlined(body: str) -> bool:
    """Whether a handler with this body is inlined into the loop."""
    source = HEADER + '\n@on("x")\ndef h(e):\n' + textwrap.indent(textwrap.dedent(body), "    ")
    tree = ast.parse(source)
    return "h" in build_runner(tree, [("h", ("x",), 0)], ["lsn", "ts", "kind", "v"], ["x"]).inlined


@pytest.mark.parametrize(
    "body",
    [
        # The per-sender float rule: assigned and read inside the same branch.
        """
        prev = total.get(e.v)
        if prev is not None:
            gap = e.ts - prev
            avg = 0.9 * gap
            emit("t", avg=avg)
        """,
        # Assigned on both paths, read after.
        """
        if e.v > 2:
            x = 1
        else:
            x = 2
        emit("t", x=x)
        """,
        # A loop variable read in the loop; an exception's name read in its handler.
        """
        for i in range(e.v):
            total[i] += i
        try:
            y = 1 // e.v
        except ZeroDivisionError as err:
            emit("t", why=str(err))
        """,
        """
        import math
        emit("t", r=math.floor(e.v / 2))
        """,
    ],
    ids=["branch", "both-branches", "loop-and-except", "import"],
)
def test_a_local_assigned_on_every_path_before_its_reads_is_inlined(body):
    assert inlined(body)


@pytest.mark.parametrize(
    "body",
    [
        """
        if e.v > 2:
            x = 1
        emit("t", x=x)
        """,
        """
        for i in range(e.v):
            pass
        emit("t", i=i)
        """,
        """
        try:
            x = 1 // e.v
        except ZeroDivisionError:
            pass
        emit("t", x=x)
        """,
        """
        try:
            1 // e.v
        except ZeroDivisionError as err:
            pass
        emit("t", why=str(err))
        """,
        """
        x = e.v
        del x
        """,
        """
        if e.v:
            n = 0
        n += 1
        """,
        """
        if (m := e.v) > 2:
            emit("t", m=m)
        """,
    ],
    ids=["one-branch", "loop-variable", "try-body", "except-name", "del", "augassign", "walrus"],
)
def test_a_local_some_path_leaves_unassigned_stays_a_call(body):
    assert not inlined(body)


def test_an_unassigned_local_raises_as_the_function_would():
    source = HEADER + textwrap.dedent(
        """
        @on("x")
        def h(e):
            if e.v > 2:
                big = e.v
            emit("t", big=big)
        """
    )
    log = rk.Log([{"ts": 1, "kind": "x", "v": 5}, {"ts": 2, "kind": "x", "v": 1}])
    with pytest.raises(rk.HandlerError, match="UnboundLocalError"):
        rk.replay(rk.Program.from_source(source, "unbound"), log)


# Handler bodies from a small grammar over two locals, an event field and one state.
_SIMPLE = st.sampled_from(
    [
        "a = e.v",
        "b = e.v * 2",
        "a = b + 1",
        "b = a - e.v",
        "total[e.k] += a",
        "total[e.k] += 1",
        "emit('t', a=a)",
        "emit('t', b=b, v=e.v)",
        "pass",
    ]
)


def _blocks(depth: int) -> st.SearchStrategy[list[str]]:
    if depth == 0:
        return st.lists(_SIMPLE, min_size=1, max_size=3)
    inner = _blocks(depth - 1)
    compound = st.one_of(
        st.tuples(st.just("if e.v % 2:"), inner, inner).map(
            lambda t: [t[0], *_ind(t[1]), "else:", *_ind(t[2])]
        ),
        st.tuples(st.just("if e.v > 3:"), inner).map(lambda t: [t[0], *_ind(t[1])]),
        st.tuples(st.just("for a in range(e.v % 3):"), inner).map(lambda t: [t[0], *_ind(t[1])]),
        st.tuples(st.just("try:"), inner, inner).map(
            lambda t: [t[0], *_ind(t[1]), "except ZeroDivisionError:", *_ind(t[2])]
        ),
    )
    return st.lists(st.one_of(_SIMPLE.map(lambda s: [s]), compound), min_size=1, max_size=4).map(
        lambda parts: [line for part in parts for line in part]
    )


def _ind(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    body=_blocks(2),
    values=st.lists(st.integers(0, 6), min_size=1, max_size=12),
)
def test_inlining_never_changes_rows_state_or_the_first_error(body, values):
    source = HEADER + '\n@on("x")\ndef h(e):\n' + "\n".join("    " + line for line in body)
    program = rk.Program.from_source(source, "generated")
    log = rk.Log([{"ts": i, "kind": "x", "v": v, "k": v % 2} for i, v in enumerate(values)])
    try:
        called = rk.replay(program, log, on_error="quarantine")
    except rk.ProgramError:
        reject()  # a name nothing assigns: refused before the replay, on either loop
    errors = called.quarantine.to_pylist()
    try:
        looped = rk.replay(program, log)
    except rk.HandlerError as exc:
        # The inlined loop stops at the first run the called handlers rolled back, with the
        # same exception.
        assert errors, f"the inlined loop raised where the function did not: {exc}"
        assert errors[0]["error"].split(":")[0] in str(exc)
        return
    assert not errors, f"the function raised where the inlined loop did not: {errors[0]}"
    assert {n: t.to_pylist() for n, t in looped.tables.items()} == {
        n: t.to_pylist() for n, t in called.tables.items()
    }
    assert looped.state == called.state
