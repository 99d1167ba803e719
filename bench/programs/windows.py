"""Windows: a tumbling count per sender and a sliding count per IP."""

from restream_kit import emit, minutes, on
from restream_kit.windows import sliding, tumbling

per_sender = tumbling(minutes(10), "count", table="sender_10min")
per_ip = sliding(minutes(5), "count")


@on("message")
def track(e):
    per_sender.add(e.src)
    per_ip.add(e.ip)
    if per_ip.value(e.ip) > 30:
        emit("ip_burst", ip=e.ip)
