"""Windows keyed like their stage: a tumbling count and sessions per sender, a sliding
count per sender with a threshold alert, and an ``on_close`` alert on the tumbling count
(every window of the rule could run whole in the sender's partition)."""

from restream_kit import emit, minutes, on
from restream_kit.windows import session, sliding, tumbling

per_sender = tumbling(minutes(10), "count", table="sender_10min")
visits = session(minutes(30), "count", table="visits")
recent = sliding(minutes(5), "count")


@on("message")
def track(e):
    per_sender.add(e.src)
    visits.add(e.src)
    recent.add(e.src)
    if recent.value(e.src) > 30:
        emit("sender_burst", src=e.src)


@per_sender.on_close
def busy(key, start, end, value):
    if value > 20:
        emit("busy_sender", src=key, start=start, n=value)
