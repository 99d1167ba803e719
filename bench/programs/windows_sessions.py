"""Sessions per sender and a hopping count of distinct recipients per IP whose ``on_close``
emits (issue 34's second example)."""

from restream_kit import emit, minutes, on
from restream_kit.windows import hopping, session

sessions = session(minutes(30), "count", table="sessions")
fanout = hopping(minutes(10), minutes(5), "distinct")


@on("message")
def track(e):
    sessions.add(e.src)
    fanout.add(e.ip, e.dst)


@fanout.on_close
def wide(key, start, end, value):
    if value > 15:
        emit("wide_ip", ip=key, start=start, value=value)
