"""StreamScope's example: alerts joined with the processes that raised them, per user.

Two streams, merged by time: ``processes`` (a process starts or ends on a host, run by a
user) and ``alerts`` (a process on a host raised an alert). An alert names its host and pid
but not its user: the join looks the user up in ``owner``, the processes running as of the
alert. Alerts are then counted per user in windows of 10 seconds that start every 5 seconds,
and a user with 20 alerts or more in one window is reported. Alerts whose process is unknown
(it started before the log) are listed apart.

    restream replay examples/streamscope.py \\
        --log processes=sample_data/streamscope/processes.parquet \\
        --log alerts=sample_data/streamscope/alerts.parquet
"""

from restream_kit import emit, on, seconds, state
from restream_kit.windows import hopping

HOT = 20

owner = state.Map(default=None)  # (host, pid) -> the user running it
per_user = hopping(seconds(10), seconds(5), "count", table="alerts_per_user")


@on("processes")
def track_process(e):
    if e.action == "start":
        owner[e.host, e.pid] = e.user
    else:
        del owner[e.host, e.pid]


@on("alerts")
def attribute(e):
    user = owner[e.host, e.pid]
    if user is None:
        emit("unattributed", host=e.host, pid=e.pid, rule=e.rule)
    else:
        per_user.add(user)


@per_user.on_close
def report(user, start, end, alerts):
    if alerts >= HOT:
        emit("hot_users", user=user, start=start, end=end, alerts=alerts)
