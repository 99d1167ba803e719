"""Session windows: a user's session closes after 30 minutes without a click.

Each click schedules a check for 30 minutes later; the check closes the session if nothing
happened since. The two handlers read each other's state, so they form one stage, and the
scheduled check carries the user, so the stage stays partitioned by ``e.user``.
"""

from restream_kit import emit, minutes, on, schedule, state

GAP = minutes(30)

last_click = state.Map(default=None)
started = state.Map(default=None)
clicks = state.Counter()


@on("click")
def click(e):
    if started[e.user] is None:
        started[e.user] = e.ts
    clicks[e.user] += 1
    last_click[e.user] = e.ts
    schedule("session_check", at=e.ts + GAP, user=e.user)


@on("session_check")
def close_if_idle(e):
    last = last_click[e.user]
    if last is not None and e.ts - last >= GAP:
        emit("sessions", user=e.user, start=started[e.user], end=last, clicks=clicks[e.user])
        del started[e.user]
        del last_click[e.user]
        del clicks[e.user]
