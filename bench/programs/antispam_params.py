"""The SPEC's anti-spam rule with its two thresholds as parameters, for sweeps and re-replays."""

from restream_kit import emit, on, param, state

ratio = param("ratio", 2.0)  # strangers per friend above which a sender is suspect
share = param("share", 0.2)  # share of messages with email above which an IP is suspect

friends = state.Map(default=False)
to_friends = state.Counter()
to_strangers = state.Counter()
ip_msgs = state.Counter()
ip_emails = state.Counter()


@on("friendship")
def befriend(e):
    friends[e.src, e.dst] = True
    friends[e.dst, e.src] = True


@on("message")
def tally_sender(e):
    if friends[e.src, e.dst]:
        to_friends[e.src] += 1
    else:
        to_strangers[e.src] += 1


@on("message")
def tally_ip(e):
    ip_msgs[e.ip] += 1
    if e.has_email:
        ip_emails[e.ip] += 1


@on("message")
def flag(e):
    if to_strangers[e.src] > ratio * to_friends[e.src] and ip_emails[e.ip] > share * ip_msgs[e.ip]:
        emit("spam", sender=e.src)
