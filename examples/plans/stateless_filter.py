"""A stateless filter: report large trades. Nothing is kept from one event to the next."""

from restream_kit import emit, on

LIMIT = 1_000_000


@on("trade")
def large_trades(e):
    notional = e.price * e.qty
    if notional >= LIMIT:
        emit("large_trades", symbol=e.symbol, notional=notional)
