"""``restream score`` and the ``--labels`` options of ``replay``, ``diff`` and ``sweep``.

Each prints one line per scored table (precision, recall, F1, the counts, alerts per day,
time to detect), and ``--json`` carries the scores (:meth:`Scores.to_dict`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..model.errors import RestreamError

__all__ = ["add_score_parser", "add_label_options", "scores_of", "cmd_score", "diff_scores"]


def add_label_options(parser: argparse.ArgumentParser, *, by: bool) -> None:
    """``--labels FILE`` and its companions (``--by`` too when the command has none)."""
    parser.add_argument(
        "--labels",
        default=None,
        metavar="FILE",
        help="score the outputs against these labels (Parquet or CSV with a column per --by "
        "field, optionally ts and class; or social_small_labels): precision, recall, F1, "
        "alerts per day, time to detect",
    )
    if by:
        parser.add_argument(
            "--by",
            default=None,
            metavar="FIELD[,FIELD]",
            help="with --labels: the key fields, in the labels and the output tables",
        )
    parser.add_argument(
        "--window",
        default=None,
        metavar="DURATION",
        help="with --labels: an alert at most this long after the label time is timely "
        "(e.g. 10min, 1h)",
    )
    parser.add_argument(
        "--bucket",
        default="1d",
        metavar="DURATION",
        help="with --labels: the width of the time buckets in --json (default 1d)",
    )
    parser.add_argument(
        "--label-time",
        default=None,
        metavar="COLUMN",
        help="with --labels: the labels' time column (default ts, when there is one)",
    )
    parser.add_argument(
        "--class",
        dest="label_class",
        default=None,
        metavar="COLUMN",
        help="with --labels: the labels' class column (default class, when there is one)",
    )
    parser.add_argument(
        "--positive",
        default=None,
        metavar="VALUE",
        help="with --labels: the class of positives (default: every row with a class)",
    )


def add_score_parser(commands) -> None:
    score = commands.add_parser(
        "score",
        help="score a run's outputs against labels: precision, recall, time to detect",
        description="Score RUN (a run name or id in the catalog, or a replay --out directory) "
        "against labels, by key: a key alerted and labelled is a true positive, alerted only "
        "a false positive, labelled only a false negative. Prints one line per output table "
        "that has the --by fields.",
    )
    score.add_argument("run", metavar="RUN", help="a run name or id, or a --out directory")
    add_label_options(score, by=True)
    score.add_argument("--keys", action="store_true", help="with --json: every key's outcome too")
    score.add_argument("--json", action="store_true", help="print the scores as JSON")


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
