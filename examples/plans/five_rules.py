"""Five spam rules over a social network, after the spam detector of the ReStream paper.

Each rule keeps a feature in state; the windowed ones are sliding windows built from future
writes (an increment now, the matching decrement when the event leaves the window):

1. strangers: the sender writes to non-friends far more than to friends;
2. burst: more than 20 messages from the sender in the last hour;
3. fan-out: more than 50 new recipients in the last day;
4. email IP: over a fifth of the messages from the IP carry an email address;
5. reported: three or more spam reports against the sender in the last week.

A sender is flagged once, on the first message where two rules or more fire.
"""

from restream_kit import days, emit, hours, on, state

HOUR = hours(1)
DAY = days(1)
WEEK = days(7)

friends = state.Map(default=False)
to_friends = state.Counter()
to_strangers = state.Counter()
sent_last_hour = state.Counter()
recent_pair = state.Map(default=False)
recipients_last_day = state.Counter()
ip_msgs = state.Counter()
ip_emails = state.Counter()
reports_last_week = state.Counter()
flagged = state.Map(default=False)


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
    sent_last_hour[e.src] += 1
    sent_last_hour.add(e.src, -1, at=e.ts + HOUR)


@on("message")
def track_recipients(e):
    pair = (e.src, e.dst)
    if not recent_pair[pair]:
        recent_pair[pair] = True
        recent_pair.delete(pair, at=e.ts + DAY)
        recipients_last_day.add(e.src, 1)
        recipients_last_day.add(e.src, -1, at=e.ts + DAY)


@on("message")
def tally_ip(e):
    ip_msgs[e.ip] += 1
    if e.has_email:
        ip_emails[e.ip] += 1


@on("report")
def count_report(e):
    reports_last_week[e.dst] += 1
    reports_last_week.add(e.dst, -1, at=e.ts + WEEK)


@on("message")
def score(e):
    if flagged[e.src]:
        return
    rules = []
    if to_strangers[e.src] > 2 * to_friends[e.src] + 5:
        rules.append("strangers")
    if sent_last_hour[e.src] > 20:
        rules.append("burst")
    if recipients_last_day[e.src] > 50:
        rules.append("fan-out")
    if ip_msgs[e.ip] >= 10 and ip_emails[e.ip] > 0.2 * ip_msgs[e.ip]:
        rules.append("email-ip")
    if reports_last_week[e.src] >= 3:
        rules.append("reported")
    if len(rules) >= 2:
        flagged[e.src] = True
        emit("spam", sender=e.src, rules=",".join(rules))
