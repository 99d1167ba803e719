"""Loading programs: from files and strings, and errors that name the file and line."""

from __future__ import annotations

import textwrap

import pytest

import restream_kit as rk


def load(body: str) -> rk.Program:
    return rk.Program.from_source(textwrap.dedent(body), name="cell")


def test_program_from_file_and_string_agree(root):
    path = root / "examples" / "antispam.py"
    from_file = rk.Program.from_file(path)
    from_text = rk.Program.from_source(path.read_text(), name="antispam")
    assert [h.name for h in from_file.handlers] == ["befriend", "tally_sender", "tally_ip", "flag"]
    assert [h.name for h in from_text.handlers] == [h.name for h in from_file.handlers]
    assert list(from_file.states) == [
        "friends",
        "to_friends",
        "to_strangers",
        "ip_msgs",
        "ip_emails",
    ]
    assert from_file.sha256 == from_text.sha256
    assert from_file.states["friends"].default is False


def test_handlers_keep_declaration_order_and_kinds():
    p = load(
        """
        from restream_kit import on

        @on("b")
        def z(e): pass

        @on("a", "b")
        def a(e): pass
        """
    )
    assert [(h.name, h.kinds, h.index) for h in p.handlers] == [
        ("z", ("b",), 0),
        ("a", ("a", "b"), 1),
    ]


def test_syntax_error_names_file_and_line(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("from restream_kit import on\n\n@on('x')\ndef h(e)\n    pass\n")
    with pytest.raises(rk.ProgramError) as info:
        rk.Program.from_file(path)
    assert str(info.value).startswith(f"{path}:4: syntax error")


def test_write_to_undeclared_state_names_the_line():
    with pytest.raises(rk.ProgramError) as info:
        load(
            """
            from restream_kit import on

            @on("x")
            def h(e):
                counts[e.k] += 1
            """
        )
    assert str(info.value).startswith(
        "<restream cell>:6: write to 'counts', which is undeclared state"
    )


def test_write_to_a_plain_dict_is_rejected():
    with pytest.raises(rk.ProgramError, match=r":6: write to 'seen', which is not declared state"):
        load(
            """
            from restream_kit import on
            seen = {}
            @on("x")
            def h(e):
                seen[e.k] = 1
            """
        )


def test_handler_for_no_kind_is_rejected_with_its_line():
    with pytest.raises(rk.ProgramError) as info:
        load(
            """
            from restream_kit import on

            @on()
            def h(e):
                pass
            """
        )
    assert "<restream cell>:4:" in str(info.value) and "at least one event kind" in str(info.value)


def test_handler_must_take_the_event():
    with pytest.raises(rk.ProgramError, match=r":4: handler 'h' must take exactly one argument"):
        load(
            """
            from restream_kit import on
            @on("x")
            def h():
                pass
            """
        )


def test_value_state_used_with_a_key_is_rejected():
    with pytest.raises(rk.ProgramError, match=r":6: total is a state.Value"):
        load(
            """
            from restream_kit import on, state
            total = state.Value(default=0)
            @on("x")
            def h(e):
                total[e.k] = 1
            """
        )


def test_state_outside_a_replay_explains_itself():
    counts = rk.state.Counter()
    with pytest.raises(RuntimeError, match="only readable and writable inside handlers"):
        counts["a"]
    with pytest.raises(RuntimeError, match="inside a handler during a replay"):
        rk.emit("t", x=1)


def test_aliases_helpers_and_module_imports_compile():
    p = load(
        """
        import restream_kit as rk
        from restream_kit import on, state

        counts = state.Counter()
        names = state.Map(default="?")

        def bump(k, by):
            counts[k] += by
            return counts[k]

        @on("x")
        def h(e):
            c = counts
            c[e.k] += 1
            n = bump(e.k, 10)
            ks = [names[k] for k in (e.k, "z")]
            rk.emit("out", n=n, got=c[e.k], ks=",".join(ks), has="z" in names)
        """
    )
    r = rk.replay(p, [{"ts": 1, "kind": "x", "k": "a"}])
    assert r.tables["out"].to_pylist() == [
        {"lsn": 0, "ts": 1, "handler": "h", "seq": 0, "n": 11, "got": 11, "ks": "?,?", "has": False}
    ]


def test_state_passed_to_a_helper_is_rejected_with_its_line():
    with pytest.raises(rk.ProgramError, match=r":9: state 'counts' is passed to bump\(\)"):
        load(
            """
            from restream_kit import on, state
            counts = state.Counter()

            def bump(m, k):
                m[k] += 1

            @on("x")
            def h(e): bump(counts, e.k)
            """
        )
