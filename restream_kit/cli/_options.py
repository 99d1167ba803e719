"""The command line's options written as data: one :class:`Option` per flag, added in order.

A command's parser is its list of options; a group several commands take (how to read one's
own log, the label options) is one tuple here, named once, that each of them adds.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Option",
    "add_command",
    "add_options",
    "switch",
    "LABELS",
    "LABELS_BY",
    "OWN_DATA",
    "QUIET",
]


@dataclass(frozen=True)
class Option:
    """One flag: its metavar (None for none), its help, and argparse's other keywords."""

    flag: str
    metavar: str | tuple[str, ...] | None
    help: str
    keywords: dict[str, Any] = field(default_factory=dict)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        # A fresh list per parser: argparse hands a list default itself to the namespace.
        keywords = {k: list(v) if isinstance(v, list) else v for k, v in self.keywords.items()}
        if self.metavar is not None:
            keywords["metavar"] = self.metavar
        parser.add_argument(self.flag, help=self.help, **keywords)


def switch(flag: str, help: str) -> Option:
    """An option that is on when given (``store_true``)."""
    return Option(flag, None, help, {"action": "store_true"})


def add_command(commands: Any, name: str, about: str) -> argparse.ArgumentParser:
    """The parser of the command ``name``, written like a docstring: ``about``'s first line is the
    summary ``restream --help`` lists, the paragraph after it the description of ``--help``."""
    summary, _, description = about.partition("\n\n")
    return commands.add_parser(name, help=summary.strip(), description=description or None)


def add_options(parser: argparse.ArgumentParser, *options: Option) -> None:
    """Add ``options`` to ``parser`` in their order (the order ``--help`` lists them in)."""
    for option in options:
        option.add_to(parser)


QUIET = switch("--quiet", "no progress on stderr")

# How to read a log of one's own (see docs/logs.md).
OWN_DATA = (
    Option(
        "--ts",
        "COLUMN",
        "the log's time column, when it is not called ts: integer milliseconds, ISO-8601 "
        "strings or timestamps",
    ),
    Option(
        "--kind",
        "NAME",
        "the kind of every event, for a log without a kind column (default: the NAME of "
        "NAME=PATH, else 'event')",
    ),
)

_LABELS_FILE = Option(
    "--labels",
    "FILE",
    "score the outputs against these labels (Parquet or CSV with a column per --by field, "
    "optionally ts and class; or social_small_labels): precision, recall, F1, alerts per day, "
    "time to detect",
)
_LABELS_KEY = Option(
    "--by", "FIELD[,FIELD]", "with --labels: the key fields, in the labels and the output tables"
)
_LABELS_MORE = (
    Option(
        "--window",
        "DURATION",
        "with --labels: an alert at most this long after the label time is timely (e.g. 10min, 1h)",
    ),
    Option(
        "--bucket",
        "DURATION",
        "with --labels: the width of the time buckets in --json (default 1d)",
        {"default": "1d"},
    ),
    Option(
        "--label-time",
        "COLUMN",
        "with --labels: the labels' time column (default ts, when there is one)",
    ),
    Option(
        "--class",
        "COLUMN",
        "with --labels: the labels' class column (default class, when there is one)",
        {"dest": "label_class"},
    ),
    Option(
        "--positive",
        "VALUE",
        "with --labels: the class of positives (default: every row with a class)",
    ),
)
# ``--labels`` and its companions, for a command with a ``--by`` of its own, and with ``--by``.
LABELS = (_LABELS_FILE, *_LABELS_MORE)
LABELS_BY = (_LABELS_FILE, _LABELS_KEY, *_LABELS_MORE)
