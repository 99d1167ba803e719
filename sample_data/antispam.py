"""The SPEC's anti-spam rule: flag senders who mostly message strangers from email-heavy IPs."""

from restream_kit import emit, on, state

friends = state.Map(default=False)  # keyed state, one value per key
to_friends = state.Counter()  # Map of numbers whose updates are merges (+=, -=)
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
    if to_strangers[e.src] > 2 * to_friends[e.src] and ip_emails[e.ip] > 0.2 * ip_msgs[e.ip]:
        emit("spam", sender=e.src)
