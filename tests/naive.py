"""A deliberately naive interpreter of SPEC section 3, and random programs for it.

Programs are data (``ProgramSpec``) rendered to restream source for the engines and
interpreted here directly. The interpreter keeps every write ever made and, at each read,
folds the visible ones from the default, in (time, position of writing run, position in run)
order, which is the SPEC's rule word for word. It is slow on purpose: nothing is incremental.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

KEYS = ("e.k", "e.j", "0")
KINDS = ("a", "b")


@dataclass(frozen=True)
class Op:
    """One statement of a handler; ``what`` picks the shape (see ``render_op``)."""

    what: str  # inc | set | future_add | future_set | delete | emit | cond_emit
    state: str
    key: str
    value: tuple = ("const", 1)  # ("const", c) | ("field",) | ("read", state, key)
    delay: int = 0
    threshold: int = 0


@dataclass(frozen=True)
class HandlerSpec:
    name: str
    kinds: tuple[str, ...]
    ops: tuple[Op, ...]


@dataclass(frozen=True)
class ProgramSpec:
    states: tuple[tuple[str, str], ...]  # (name, "counter" | "map")
    handlers: tuple[HandlerSpec, ...]


# -- rendering -----------------------------------------------------------------------------


def render_value(value: tuple) -> str:
    if value[0] == "const":
        return str(value[1])
    if value[0] == "field":
        return "e.v"
    return f"({value[1]}[{value[2]}] + 1)"


def render_op(op: Op) -> list[str]:
    s, k, v = op.state, op.key, render_value(op.value)
    if op.what == "inc":
        return [f"{s}[{k}] += {v}"]
    if op.what == "set":
        return [f"{s}[{k}] = {v}"]
    if op.what == "future_add":
        return [f"{s}.add({k}, {v}, at=e.ts + {op.delay})"]
    if op.what == "future_set":
        return [f"{s}.set({k}, {v}, at=e.ts + {op.delay})"]
    if op.what == "delete":
        return [f"del {s}[{k}]"]
    if op.what == "emit":
        return [f'emit("out", v={s}[{k}], has={k} in {s})']
    return [f"if {s}[{k}] > {op.threshold}:", f'    emit("out", v={op.threshold})']


def render(spec: ProgramSpec) -> str:
    lines = ["from restream_kit import state, on, emit", ""]
    for name, kind in spec.states:
        decl = "state.Counter()" if kind == "counter" else "state.Map(default=0)"
        lines.append(f"{name} = {decl}")
    for h in spec.handlers:
        kinds = ", ".join(repr(k) for k in h.kinds)
        lines += ["", "", f"@on({kinds})", f"def {h.name}(e):"]
        for op in h.ops:
            lines += ["    " + line for line in render_op(op)]
    return "\n".join(lines) + "\n"


# -- the naive interpreter ---------------------------------------------------------------------


@dataclass
class Write:
    time: int
    run: int
    index: int
    state: str
    key: object
    what: str  # set | add | delete
    arg: object
    future: bool


def run_naive(spec: ProgramSpec, events: list[dict]) -> tuple[list[tuple], dict]:
    """Rows ``(lsn, handler, fields)`` of table "out" and the final state, per the SPEC."""
    ordered = sorted(enumerate(events), key=lambda item: (item[1]["ts"], item[0]))
    writes: list[Write] = []
    rows: list[tuple] = []
    now = 0

    def read(state: str, key, run: int):
        visible = [
            w
            for w in writes
            if w.state == state and w.key == key and (not w.future or w.time <= now)
        ]
        visible.sort(key=lambda w: (w.time, w.run, w.index))
        value = None
        for w in visible:
            if w.what == "set":
                value = w.arg
            elif w.what == "add":
                value = (0 if value is None else value) + w.arg
            else:
                value = None
        return value

    run = 0
    for lsn, (_, e) in enumerate(ordered):
        now = e["ts"]
        for h in spec.handlers:
            if e["kind"] not in h.kinds:
                continue
            index = 0
            env = {"e.k": e["k"], "e.j": e["j"], "0": 0}

            def value_of(v, run=run, e=e, env=env):
                if v[0] == "const":
                    return v[1]
                if v[0] == "field":
                    return e["v"]
                got = read(v[1], env[v[2]], run)
                return (0 if got is None else got) + 1

            for op in h.ops:
                key = env[op.key]
                if op.what in ("inc", "set", "delete"):
                    arg = value_of(op.value) if op.what != "delete" else None
                    what = {"inc": "add", "set": "set", "delete": "delete"}[op.what]
                    writes.append(Write(now, run, index, op.state, key, what, arg, False))
                elif op.what in ("future_add", "future_set"):
                    arg = value_of(op.value)
                    what = "add" if op.what == "future_add" else "set"
                    writes.append(Write(now + op.delay, run, index, op.state, key, what, arg, True))
                else:
                    got = read(op.state, key, run)
                    current = 0 if got is None else got
                    if op.what == "emit":
                        rows.append((lsn, h.name, {"v": current, "has": got is not None}))
                    elif current > op.threshold:
                        rows.append((lsn, h.name, {"v": op.threshold}))
                index += 1
            run += 1
    final: dict = {name: {} for name, _ in spec.states}
    for name, _ in spec.states:
        for key in dict.fromkeys(w.key for w in writes if w.state == name):
            value = read(name, key, run)
            if value is not None:
                final[name][key] = value
    return rows, final


# -- strategies ---------------------------------------------------------------------------------


@st.composite
def programs(draw) -> ProgramSpec:
    n_states = draw(st.integers(1, 3))
    states = tuple((f"s{i}", draw(st.sampled_from(["counter", "map"]))) for i in range(n_states))
    names = [s for s, _ in states]
    values = st.one_of(
        st.tuples(st.just("const"), st.integers(-2, 3)),
        st.tuples(st.just("field")),
        st.tuples(st.just("read"), st.sampled_from(names), st.sampled_from(KEYS)),
    )
    op = st.builds(
        Op,
        what=st.sampled_from(
            ["inc", "set", "future_add", "future_set", "delete", "emit", "cond_emit"]
        ),
        state=st.sampled_from(names),
        key=st.sampled_from(KEYS),
        value=values,
        delay=st.integers(0, 6),
        threshold=st.integers(-1, 3),
    )
    n_handlers = draw(st.integers(1, 4))
    handlers = tuple(
        HandlerSpec(
            name=f"h{i}",
            kinds=tuple(draw(st.sets(st.sampled_from(KINDS), min_size=1, max_size=2)).__iter__()),
            ops=tuple(draw(st.lists(op, min_size=1, max_size=4))),
        )
        for i in range(n_handlers)
    )
    return ProgramSpec(states, tuple(sorted_kinds(h) for h in handlers))


def sorted_kinds(h: HandlerSpec) -> HandlerSpec:
    return HandlerSpec(h.name, tuple(sorted(h.kinds)), h.ops)


events = st.lists(
    st.fixed_dictionaries(
        {
            "ts": st.integers(0, 20),
            "kind": st.sampled_from(KINDS),
            "k": st.integers(0, 2),
            "j": st.integers(0, 2),
            "v": st.integers(-3, 3),
        }
    ),
    min_size=1,
    max_size=25,
)


# -- cases for the Spark engine against the serial engine (tests/engine_suite, tests/engines) --

#: Handlers the passes find hard: a read by a key that is not a function of the event (a
#: broadcast-read stage: the whole program runs as one sequential pass), and scheduled events.
EXTRAS = {
    "broadcast": """

@on("b")
def hx(e):
    emit("out", v=s0[s0[e.k] % 3], w=e.v)
""",
    "schedule": """

@on("a")
def hx(e):
    schedule("b", at=e.ts + 2, k=e.k, j=e.j, v=e.v)
""",
}


def one_key(spec):
    """The same program with every key ``e.k``: its stages partition by ``e.k``."""
    from dataclasses import replace

    def op(o):
        value = ("read", o.value[1], "e.k") if o.value[0] == "read" else o.value
        return replace(o, key="e.k", value=value)

    handlers = tuple(replace(h, ops=tuple(op(o) for o in h.ops)) for h in spec.handlers)
    return replace(spec, handlers=handlers)


@st.composite
def spark_cases(draw):
    """A program (plain, partitioned by one key, or with an extra above), a log (with a hot
    key holding half the events, sometimes), an epoch size (one epoch, mostly) and the path."""
    spec = draw(programs())
    shape = draw(st.sampled_from(["plain", "plain", "one key", "one key", "extra"]))
    if shape == "one key":
        spec = one_key(spec)
    source = render(spec)
    if shape == "extra":
        source = (
            source.replace(
                "from restream_kit import state, on, emit",
                "from restream_kit import state, on, emit, schedule",
            )
            + EXTRAS[draw(st.sampled_from(sorted(EXTRAS)))]
        )
    log = draw(events)
    if draw(st.booleans()):
        log = [dict(e, k=0, j=0) if i % 2 else e for i, e in enumerate(log)]
    epoch = draw(st.sampled_from([None, None, None, None, len(log) // 2 + 1, "8ms"]))
    # "auto" takes the prefix path whenever the program lowers and the pass path otherwise;
    # "passes" always the pass path (scheduled events and timed writes in parallel passes).
    path = draw(st.sampled_from(["auto", "passes", "passes"]))
    return source, log, epoch, path
