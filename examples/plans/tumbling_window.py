"""Tumbling one-minute windows of traded volume per symbol, closed by a scheduled event.

The keys of the two handlers are written differently (``(e.symbol, window_end(e.ts))`` and
``(e.symbol, e.end)``) but both start with the symbol, so the stage is partitioned by
``e.symbol``; the scheduled close carries the symbol, so it stays in its partition.
"""

from restream_kit import emit, minutes, on, schedule, state

WIDTH = minutes(1)

volume = state.Counter()
is_open = state.Map(default=False)


def window_end(ts):
    return ts - ts % WIDTH + WIDTH


@on("trade")
def add_trade(e):
    key = (e.symbol, window_end(e.ts))
    if not is_open[key]:
        is_open[key] = True
        schedule("close", at=window_end(e.ts), symbol=e.symbol, end=window_end(e.ts))
    volume[key] += e.qty


@on("close")
def close(e):
    key = (e.symbol, e.end)
    emit("volume", symbol=e.symbol, end=e.end, qty=volume[key])
    del volume[key]
    del is_open[key]
