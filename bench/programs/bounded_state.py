"""A rule whose state stops growing: a per-sender EWMA of the gap between messages and a
per-IP sliding count. Its state is bounded by the users and IPs, not by the log."""

from restream_kit import emit, minutes, on, state
from restream_kit.windows import ewma, sliding

gap = ewma(0.1)
last_seen = state.Map(default=None)
per_ip = sliding(minutes(5), "count")


@on("message")
def track(e):
    per_ip.add(e.ip)
    prev = last_seen.get(e.src)
    if prev is not None:
        avg = gap.update(e.src, (e.ts - prev) / 1000.0)
        if avg < 0.01 and per_ip.value(e.ip) > 400:
            emit("burst", sender=e.src, ip=e.ip, avg=round(avg, 4))
    last_seen[e.src] = e.ts
