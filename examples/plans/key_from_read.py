"""A read by a key computed from another read: messages are charged to the sender's team.

``charge`` merges into ``team_msgs`` by a team it looked up, which is fine for a blind merge;
``over_quota`` reads ``team_msgs`` by that looked-up team, a key that is not a function of the
event, so its stage needs the whole of ``team_msgs`` (broadcast-read).
"""

from restream_kit import emit, on, state

QUOTA = 1_000

team_of = state.Map(default=None)
team_msgs = state.Counter()


@on("join")
def join(e):
    team_of[e.user] = e.team


@on("message")
def charge(e):
    team = team_of[e.src]
    if team is not None:
        team_msgs[team] += 1


@on("message")
def over_quota(e):
    team = team_of[e.src]
    if team is not None and team_msgs[team] > QUOTA:
        emit("over_quota", team=team, sender=e.src)
