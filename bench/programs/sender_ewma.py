"""Per-sender float rule: an exponentially weighted gap between a sender's messages."""

from restream_kit import emit, on, state

gap_avg = state.Map(default=0.0)
last_seen = state.Map(default=None)


@on("message")
def track(e):
    prev = last_seen.get(e.src)
    if prev is not None:
        gap = (e.ts - prev) / 1000.0
        avg = 0.9 * gap_avg[e.src] + 0.1 * gap
        gap_avg[e.src] = avg
        if avg < 0.5:
            emit("bursty", sender=e.src, avg=round(avg, 3))
    last_seen[e.src] = e.ts
