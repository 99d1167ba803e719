"""The command line's arguments read as the project's objects (a log, a program, a run's
tables, parameter values) and a diff said as JSON or text: shared by its commands."""

from __future__ import annotations

import argparse

from ..model.errors import RestreamError

__all__ = [
    "conf_arg",
    "diff_json",
    "diff_text",
    "log_arg",
    "params_arg",
    "program_arg",
    "run_arg",
]


def log_arg(values: list[str], args: argparse.Namespace):
    """The ``--log`` values as one log, read as ``--ts`` and ``--kind`` say."""
    from ..io.log import Log

    return Log(values, ts=args.ts, kind=args.kind)


def conf_arg(items: list[str]) -> dict[str, str]:
    conf = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise RestreamError(f"--conf {item!r}: expected KEY=VALUE")
        conf[key.strip()] = value
    return conf


def program_arg(path: str):
    from ..model.program import Program

    return Program.load(path)


def params_arg(items: list[str], many: bool) -> dict:
    """``NAME=VALUE`` (or ``NAME=V1,V2`` when ``many``) options as a dict of parsed values."""
    from ..model.params import parse_value

    out: dict = {}
    for item in items:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name or not text.strip():
            shape = "NAME=V1,V2,..." if many else "NAME=VALUE"
            raise RestreamError(f"--param {item!r}: expected {shape}")
        if name in out:
            raise RestreamError(f"--param {name} is given twice")
        out[name] = [parse_value(v) for v in text.split(",")] if many else parse_value(text)
    return out


def run_arg(ref: str, log=None) -> tuple[str, dict]:
    """The output tables of ``ref``: a ``--out`` directory or a catalog run (``load_run``)."""
    from ..io.compare import load_run

    return load_run(ref, log)


def diff_json(differences) -> dict:
    from ..io.compare import KeyDiff

    if isinstance(differences, KeyDiff):
        return differences.to_dict()
    return {
        "empty": differences.empty,
        "tables": {
            name: {"rows": t.rows, "baseline_rows": t.baseline_rows, **t.counts}
            for name, t in differences.tables.items()
        },
    }


def diff_text(differences, samples: int) -> str:
    from ..io.compare import KeyDiff

    if isinstance(differences, KeyDiff):
        return differences.summary(samples=samples)
    return differences.text(samples=samples)
