"""A handler that is not deterministic: it samples messages at random. The planner rejects it."""

import random

from restream_kit import emit, on


@on("message")
def sample(e):
    if random.random() < 0.01:
        emit("sampled", sender=e.src)
