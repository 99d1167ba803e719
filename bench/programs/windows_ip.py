"""Windows keyed unlike the benchmark's own: a tumbling count per IP, a sliding count per
sender with a threshold alert (issue 34's first example)."""

from restream_kit import emit, minutes, on
from restream_kit.windows import sliding, tumbling

per_ip = tumbling(minutes(10), "count", table="ip_10min")
per_sender = sliding(minutes(5), "count")


@on("message")
def track(e):
    per_ip.add(e.ip)
    per_sender.add(e.src)
    if per_sender.value(e.src) > 30:
        emit("sender_burst", src=e.src)
