"""Ad-click fraud: clicks joined with the impressions they came from, bursts per IP and per
publisher.

Two streams, merged by time: ``impressions`` (an ad shown on a publisher's page to an IP) and
``clicks`` (a click on an impression). The join keeps every impression for an hour, as of each
click. A click is suspicious when its impression was never served or when it came less than a
second after it; an IP is a bot when it clicks 20 times within a minute; a publisher is buying
clicks when 10 or more of its clicks in a 10-minute window, counted every minute, had no
impression.

    restream replay examples/adclicks.py \\
        --log impressions=sample_data/adclicks/impressions.parquet \\
        --log clicks=sample_data/adclicks/clicks.parquet
"""

from restream_kit import emit, hours, minutes, on, seconds, state
from restream_kit.windows import hopping, sliding

TOO_FAST = seconds(1)
IP_BURST = 20
ORPHANS = 10

served = state.Map(default=None)  # impression id -> when it was shown, for an hour
ip_clicks = sliding(minutes(1), "count")
orphans = hopping(minutes(10), minutes(1), "count")
publisher_clicks = hopping(minutes(10), minutes(1), "count", table="publisher_clicks")
publisher_ips = hopping(minutes(10), minutes(1), "distinct", table="publisher_ips")


@on("impressions")
def serve(e):
    served[e.impression_id] = e.ts
    served.delete(e.impression_id, at=e.ts + hours(1))


@on("clicks")
def click(e):
    shown = served[e.impression_id]
    if shown is None:
        emit("suspicious", ip=e.ip, publisher=e.publisher, reason="never served")
        orphans.add(e.publisher)
    elif e.ts - shown < TOO_FAST:
        emit("suspicious", ip=e.ip, publisher=e.publisher, reason="too fast")
    ip_clicks.add(e.ip)
    if ip_clicks.value(e.ip) == IP_BURST:
        emit("bot_ips", ip=e.ip, publisher=e.publisher)
    publisher_clicks.add(e.publisher)
    publisher_ips.add(e.publisher, e.ip)


@orphans.on_close
def buying_clicks(publisher, start, end, count):
    if count >= ORPHANS:
        emit("publisher_alerts", publisher=publisher, start=start, end=end, orphans=count)
