"""A broadcast read: messages charged to the sender's team, which a rule reads by the team it
looks up (not a function of the event), so that every partition needs all the teams' counts.

``join`` puts a user in a team on each friendship; ``charge`` counts the team's messages over
a sliding hour (a timed write takes each one back); ``busy`` reads that count by the
looked-up team and flags busy teams.
"""

from restream_kit import emit, hours, on, state

TEAMS = 50

team_of = state.Map(default=None)  # user -> team
team_hour = state.Counter()  # messages per team in the last hour


@on("friendship")
def join(e):
    team_of[e.src] = e.dst % TEAMS


@on("message")
def charge(e):
    team = team_of[e.src]
    if team is not None:
        team_hour[team] += 1
        team_hour.add(team, -1, at=e.ts + hours(1))


@on("message")
def busy(e):
    team = team_of[e.src]
    if team is not None and team_hour[team] > 400:
        emit("busy_team", team=team, sender=e.src, messages=team_hour[team])
