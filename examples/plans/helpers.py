"""Handlers that call module-level helper functions; the planner follows every call.

``sender`` only returns an expression, so it is inlined into keys; ``bump`` writes state
through its parameter; ``seen_recently`` reads state by a key built from its arguments.
"""

from restream_kit import emit, on, seconds, state

WINDOW = seconds(60)

counts = state.Counter()
last_seen = state.Map(default=None)


def sender(ev):
    return ev.src


def bump(key, amount=1):
    counts[key] += amount


def seen_recently(event, window):
    before = last_seen[sender(event)]
    return before is not None and event.ts - before < window


@on("message")
def tally(e):
    bump(sender(e))


@on("message")
def touch(e):
    if seen_recently(e, WINDOW):
        emit("chatty", user=e.src, messages=counts[e.src])
    last_seen[e.src] = e.ts
