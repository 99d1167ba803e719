"""The anti-spam rule of examples/antispam.py written by hand: the plain-Python baseline.

``python -m bench.plain_antispam LOG.parquet [--dump ROWS.json]`` reads the log with pyarrow,
runs the rule over its rows with one dict per piece of state and prints the row count and a
digest of the spam rows (see ``bench.rows``).

It is meant to be the fastest honest plain Python for the rule: whole columns turned into
lists and zipped, bound ``get`` methods, each counter read and bumped once per event, the
three message handlers' effects in declaration order, spam rows collected as tuples
``(lsn, ts, sender)``. It relies on the log being in time order already (the generator writes
it so, and the harness checks) and takes a row's position as its lsn, which is what the serial
engine's stable sort gives; so it does no sorting.
"""

from __future__ import annotations

import sys

import pyarrow.parquet as pq

from bench.rows import report

__all__ = ["antispam", "main"]

COLUMNS = ["ts", "kind", "src", "dst", "ip", "has_email"]


def antispam(path: str) -> list[tuple[int, int, int]]:
    """The rule's output over the log at ``path``: ``(lsn, ts, sender)`` per spam row."""
    table = pq.read_table(path, columns=COLUMNS)
    ts, kind, src, dst, ip, has_email = (table.column(name).to_pylist() for name in COLUMNS)
    del table
    friends: dict[tuple[int, int], bool] = {}
    to_friends: dict[int, int] = {}
    to_strangers: dict[int, int] = {}
    ip_msgs: dict[str, int] = {}
    ip_emails: dict[str, int] = {}
    friends_get, strangers_get = to_friends.get, to_strangers.get
    msgs_get, emails_get = ip_msgs.get, ip_emails.get
    spam: list[tuple[int, int, int]] = []
    append = spam.append
    for lsn, k, s, d, i, email in zip(range(len(kind)), kind, src, dst, ip, has_email):
        if k == "message":
            # tally_sender
            if (s, d) in friends:
                f = to_friends[s] = friends_get(s, 0) + 1
                x = strangers_get(s, 0)
            else:
                x = to_strangers[s] = strangers_get(s, 0) + 1
                f = friends_get(s, 0)
            # tally_ip
            m = ip_msgs[i] = msgs_get(i, 0) + 1
            if email:
                e = ip_emails[i] = emails_get(i, 0) + 1
            else:
                e = emails_get(i, 0)
            # flag
            if x > 2 * f and e > 0.2 * m:
                append((lsn, ts[lsn], s))
        elif k == "friendship":
            # befriend
            friends[s, d] = True
            friends[d, s] = True
    return spam


def main(argv: list[str]) -> int:
    """Run the rule over the log ``argv[0]`` and print what it found."""
    spam = antispam(argv[0])
    dump = argv[argv.index("--dump") + 1] if "--dump" in argv else None
    report([row[0] for row in spam], [row[2] for row in spam], dump)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
