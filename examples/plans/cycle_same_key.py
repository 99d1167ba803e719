"""A cycle whose handlers share a key: payments and holds on one account.

``pay`` reads the holds that ``hold`` writes, ``hold`` reads the balance that ``pay`` writes:
a cycle, so one stage. Every access in it is keyed by the account (written ``e.account`` in
one handler and ``ev.account`` in the other), so the stage is partitioned by account.
"""

from restream_kit import emit, on, state

balance = state.Counter()
held = state.Counter()


@on("deposit")
def deposit(e):
    balance[e.account] += e.amount


@on("payment")
def pay(e):
    if e.amount <= balance[e.account] - held[e.account]:
        balance[e.account] -= e.amount
        emit("paid", account=e.account, amount=e.amount)
    else:
        emit("declined", account=e.account, amount=e.amount)


@on("hold")
def hold(ev):
    if ev.amount <= balance[ev.account] - held[ev.account]:
        held[ev.account] += ev.amount
