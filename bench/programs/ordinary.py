"""An ordinary Python rule: a float EWMA per sender, a sliding one-hour count per IP kept by
a timed write, and a rule that reads both."""

from restream_kit import emit, hours, on, state

rate = state.Map(default=0.0)  # EWMA of messages with an email, per sender
ip_hour = state.Counter()  # messages per IP in the last hour


def smooth(old, x, alpha=0.05):
    return (1 - alpha) * old + alpha * x


@on("message")
def sender_rate(e):
    rate[e.src] = smooth(rate[e.src], 1.0 if e.has_email else 0.0)


@on("message")
def ip_window(e):
    ip_hour[e.ip] += 1
    ip_hour.add(e.ip, -1, at=e.ts + hours(1))


@on("message")
def suspicious(e):
    if rate.get(e.src, 0.0) > 0.15 and ip_hour[e.ip] > 5:
        emit("suspicious", sender=e.src, ip=e.ip, rate=round(rate[e.src], 4))
