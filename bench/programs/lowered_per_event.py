"""A rule that lowers to columns (the Spark engine's prefix path) and emits a row per message:
its output table is as large as the log."""

from restream_kit import emit, on, state

sent = state.Counter()  # messages per sender
emails = state.Counter()  # of which with an email


@on("message")
def count(e):
    sent[e.src] += 1
    if e.has_email:
        emails[e.src] += 1
    emit("counts", sender=e.src, ip=e.ip, sent=sent[e.src], emails=emails[e.src])
