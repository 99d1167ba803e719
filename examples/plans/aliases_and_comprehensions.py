"""State used through aliases, comprehensions, conditionals, ``in`` and ``.get``.

``mention`` counts mentions of every user named in a message (a comprehension over the
event's list) and keeps who mentioned whom through a local alias; ``reply`` checks ``in`` and
``.get`` on what ``mention`` wrote.
"""

from restream_kit import emit, on, state

mentioned = state.Counter()
mentioned_by = state.Map(default=None)


@on("message")
def mention(e):
    by = mentioned_by
    for user in e.mentions:
        mentioned[user] += 1
        by[user] = e.src


@on("message")
def reply(e):
    busy = [u for u in e.mentions if mentioned[u] > 100]
    if e.dst in mentioned_by and mentioned_by.get(e.dst) == e.src:
        emit("replies", user=e.src, to=e.dst, busy=len(busy))
