"""``restream score`` and the ``--labels`` options of ``replay``, ``diff`` and ``sweep``.

Each prints one line per scored table (precision, recall, F1, the counts, alerts per day,
time to detect), and ``--json`` carries the scores (:meth:`Scores.to_dict`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..model.errors import RestreamError
from ._options import LABELS_BY, add_command, add_options, switch

__all__ = ["add_score_parser", "scores_of", "cmd_score", "diff_scores"]


_SCORE = """\
score a run's outputs against labels: precision, recall, time to detect

Score RUN (a run name or id in the catalog, or a replay --out directory) against labels, by key:
a key alerted and labelled is a true positive, alerted only a false positive, labelled only a
false negative. Prints one line per output table that has the --by fields.
"""


def add_score_parser(commands) -> None:
    score = add_command(commands, "score", _SCORE)
    score.add_argument("run", metavar="RUN", help="a run name or id, or a --out directory")
    add_options(
        score,
        *LABELS_BY,
        switch("--keys", "with --json: every key's outcome too"),
        switch("--json", "print the scores as JSON"),
    )


def check_label_options(args: argparse.Namespace) -> None:
    """``--labels`` needs ``--by``; the other label options need ``--labels``."""
    if args.labels and not args.by:
        raise RestreamError("--labels needs --by FIELD[,FIELD]: the key fields to score by")
    if not args.labels:
        given = [o for o, v in (("--window", args.window), ("--positive", args.positive)) if v]
        given += ["--class"] if args.label_class else []
        given += ["--label-time"] if args.label_time else []
        if given:
            raise RestreamError(f"{', '.join(given)} go with --labels FILE")


def options(args: argparse.Namespace) -> dict[str, Any]:
    """``score``'s keyword arguments from the command line."""
    return {
        "ts": args.label_time,
        "class_column": args.label_class,
        "positive": args.positive,
        "window": args.window,
        "bucket": args.bucket,
    }


def scores_of(args: argparse.Namespace, run: Any, name: str | None = None):
    """``run`` scored against ``--labels`` by ``--by`` (the labels are read once per args)."""
    from ..io.compare import parse_by
    from ..iterate.score import read_labels, score

    if getattr(args, "_labels_read", None) is None:
        args._labels_read = read_labels(
            args.labels,
            parse_by(args.by),
            ts=args.label_time,
            class_column=args.label_class,
            positive=args.positive,
        )
    return score(run, args._labels_read, args.by, window=args.window, bucket=args.bucket, name=name)


def cmd_score(args: argparse.Namespace) -> int:
    """``restream score RUN --labels FILE --by FIELD``."""
    if not args.labels:
        raise RestreamError("score needs --labels FILE")
    check_label_options(args)
    scores = scores_of(args, args.run)
    if args.json:
        print(json.dumps(scores.to_dict(keys=args.keys), default=str))
    else:
        print(scores.summary())
    return 0


def diff_scores(args: argparse.Namespace, a: Any, b: Any, labels: tuple[str, str]) -> tuple:
    """Both sides scored, and the keys that changed class from B to A; (json, text)."""
    from ..iterate.score import changed_keys

    sa, sb = scores_of(args, a, labels[0]), scores_of(args, b, labels[1])
    changes = changed_keys(sa, sb)
    data = {
        "a": sa.to_dict(),
        "b": sb.to_dict(),
        "changed_keys": [
            {k: v if isinstance(v, (int, float, str, type(None))) else str(v) for k, v in r.items()}
            for r in changes.iter_rows(named=True)
        ],
    }
    lines = ["scores against the labels:"]
    for table in dict.fromkeys([*sa.tables, *sb.tables]):
        for side, s in ((labels[0], sa), (labels[1], sb)):
            if table in s.tables:
                lines.append(f"  {side}: {s.tables[table].summary()}")
    counts = changes.group_by("change").len().sort("change").iter_rows()
    moved = ", ".join(f"{n:,} {what}" for what, n in counts)
    lines.append(f"  keys that changed class in {labels[0]}: {moved or 'none'}")
    return data, "\n".join(lines)


def sweep_scores(args: argparse.Namespace, sweep: Any):
    """Every variant scored (:func:`score_sweep`)."""
    from ..iterate.score import score_sweep

    return score_sweep(sweep, args.labels, args.by, **{k: v for k, v in options(args).items()})
