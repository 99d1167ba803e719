"""A cycle whose handlers use different keys: votes promote candidates, who may then vote.

``vote`` counts a vote for the candidate (``e.dst``) when the voter (``e.src``) is in good
standing; ``promote`` gives standing to a candidate with three votes. Each reads what the
other writes, so they form one stage, and ``vote`` reads standing by the voter while
``promote`` writes it by the candidate: no single key keeps them apart, so the stage runs
sequentially and the plan names the read that forces it.
"""

from restream_kit import emit, on, state

standing = state.Map(default=False)
votes = state.Counter()


@on("seed")
def seed(e):
    standing[e.src] = True


@on("vote")
def vote(e):
    if standing[e.src]:
        votes[e.dst] += 1


@on("vote")
def promote(e):
    if votes[e.dst] >= 3 and not standing[e.dst]:
        standing[e.dst] = True
        emit("promoted", user=e.dst)
