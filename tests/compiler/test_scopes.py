"""The one resolver of which name means which state inside nested functions."""

from __future__ import annotations

import ast
import textwrap

from restream_kit.compiler.scopes import StateResolver, make_scope, no_state

SOURCE = textwrap.dedent(
    """
    def handler(e):
        m = counts
        total = e.amount
        def inner(x):
            seen = 1
            global flags
            flags = 2
            return m, seen, counts, flags
        return inner
    """
)


def _functions():
    outer = ast.parse(SOURCE).body[0]
    inner = next(n for n in outer.body if isinstance(n, ast.FunctionDef))
    return outer, inner


def test_aliases_locals_and_globals_resolve_through_the_enclosing_scopes():
    resolver = StateResolver({"counts", "seen", "total", "flags"})
    outer, inner = _functions()
    handler = resolver.scope(outer)
    nested = resolver.scope(inner, [handler])
    stack = [handler, nested]
    assert handler.aliases == {"m": "counts"}
    assert resolver.state_of("m", stack) == "counts"  # the alias, seen from the inner function
    assert resolver.state_of("counts", stack) == "counts"  # bound nowhere: the module's state
    assert resolver.state_of("seen", stack) is None  # a local of the inner function hides it
    assert resolver.state_of("total", stack) is None  # a local of the handler hides it
    assert resolver.state_of("total", stack[1:]) == "total"  # without the handler: state
    assert resolver.state_of("flags", stack) == "flags"  # declared global, so not a local
    assert resolver.binding("seen", stack) == ("local", 1)
    assert resolver.binding("total", stack) == ("local", 0)
    assert resolver.binding("m", stack) == ("state", "counts")
    assert resolver.binding("counts", stack) is None


def test_a_function_read_on_its_own_has_no_aliases():
    outer, _ = _functions()
    assert make_scope(outer, no_state).aliases == {}
    assert "m" in make_scope(outer, no_state).shadowed
