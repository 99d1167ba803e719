"""Labels for the social log: the spammers ``social.generate`` made, as a review would list them.

The generator draws its spammers first (``social.spammers``): they write mostly to strangers,
from a small pool of shared IPs, with email addresses in most messages. The labels are the
spammers who sent at least one message in the log, one row each: ``sender`` (the user id, as
the anti-spam rule emits it), ``ts`` (the time of their first message: when the case became
true) and ``class`` (``spammer``). A light spammer who wrote once or twice is hard to catch;
a light user who is not a spammer but messaged a stranger with an email address is flagged
by the demo rule: so the rule catches some of the labels, not all, and raises false alarms.

The same arguments always give the same labels::

    python -m sample_data.spam_labels --events 50000 --seed 0 --out sample_data/labels/social_small.parquet
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import social

__all__ = ["labels", "main", "SCHEMA"]

SCHEMA = pa.schema([("sender", pa.int64()), ("ts", pa.int64()), ("class", pa.string())])


def labels(log: pa.Table, events: int, *, users: int | None = None, seed: int = 0) -> pa.Table:
    """The labels of ``log``, the table ``social.generate(events, users=users, seed=seed)``
    made: its spammers who sent a message, at their first message, ordered by sender."""
    ids = pa.array(social.spammers(events, users=users, seed=seed), pa.int64())
    messages = log.filter(pc.equal(log.column("kind"), "message"))
    messages = messages.filter(pc.is_in(messages.column("src"), value_set=ids))
    first = messages.group_by("src").aggregate([("ts", "min")]).sort_by("src")
    senders = first.column("src").combine_chunks()
    return pa.table(
        [
            senders,
            first.column("ts_min").combine_chunks(),
            pa.array(np.full(len(senders), "spammer", dtype=object), pa.string()),
        ],
        schema=SCHEMA,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m sample_data.spam_labels --events N --out PATH [--seed S] [--users U]``."""
    parser = argparse.ArgumentParser(
        prog="python -m sample_data.spam_labels",
        description="Write the spammer labels of the social log of these arguments as Parquet.",
    )
    parser.add_argument("--events", type=int, required=True, help="events of the log")
    parser.add_argument("--out", required=True, help="Parquet file to write")
    parser.add_argument("--users", type=int, default=None, help="number of users (events / 50)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    args = parser.parse_args(argv)
    log = social.generate(args.events, users=args.users, seed=args.seed)
    table = labels(log, args.events, users=args.users, seed=args.seed)
    path = social.write(table, Path(args.out))
    print(f"wrote {path}: {table.num_rows:,} spammers who sent a message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
