"""A per-sender rate limit: at most 10 messages in any minute, a sliding window by future
writes. Every access is keyed by the sender, so the stage is partitioned by ``e.src``, and how
parallel it runs depends on how active the busiest senders are."""

from restream_kit import emit, minutes, on, state

LIMIT = 10
WINDOW = minutes(1)

in_window = state.Counter()
over = state.Map(default=False)


@on("message")
def limit(e):
    in_window[e.src] += 1
    in_window.add(e.src, -1, at=e.ts + WINDOW)
    if in_window[e.src] > LIMIT and not over[e.src]:
        over[e.src] = True
        emit("rate_limited", sender=e.src)
    elif in_window[e.src] <= LIMIT and over[e.src]:
        over[e.src] = False
