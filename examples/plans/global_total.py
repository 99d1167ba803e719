"""A running total in a state.Value: one value, so the handler that reads and writes it runs
sequentially, while the per-account tally beside it is stateless."""

from restream_kit import emit, on, state

total = state.Value(default=0)
per_account = state.Counter()
MILESTONE = 1_000_000


@on("payment")
def tally_account(e):
    per_account[e.account] += e.amount


@on("payment")
def running_total(e):
    before = total.value
    total.value = before + e.amount
    if before // MILESTONE != total.value // MILESTONE:
        emit("milestones", total=total.value)
