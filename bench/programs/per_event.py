"""A rule that emits a row per message: its output table is as large as the log."""

from restream_kit import emit, on, state

rate = state.Map(default=0.0)  # EWMA of messages with an email, per sender


@on("message")
def score(e):
    rate[e.src] = 0.95 * rate[e.src] + 0.05 * (1.0 if e.has_email else 0.0)
    emit("scores", sender=e.src, ip=e.ip, rate=rate[e.src])
