"""Where a Spark replay runs: the master URL and Spark settings, without secrets in notebooks.

Each setting is taken from the first place that has it:

1. arguments (``replay(..., master=..., conf={...})``, ``--master``/``--conf`` on the command
   line, ``%%restream --master``);
2. environment variables: ``RESTREAM_MASTER`` (``RESTREAM_SPARK_MASTER`` is still read), and
   ``RESTREAM_SPARK_CONF``, either a JSON object (``{"spark.executor.memory": "2g"}``) or
   ``key=value`` pairs separated by commas (``spark.executor.memory=2g,spark.cores.max=4``);
3. a profile file: ``$RESTREAM_PROFILE`` if set, else ``$RESTREAM_HOME/profile.toml`` when
   ``RESTREAM_HOME`` is set, else ``~/.restream/profile.toml``::

       master = "spark://10.0.0.5:7077"
       executor_wait = 30          # seconds to wait for executors before giving up
       [conf]
       "spark.executor.memory" = "4g"

Spark settings merge key by key in that order (an argument beats the environment, which beats
the profile). A Spark Connect token is read only from ``RESTREAM_CONNECT_TOKEN`` and appended
to an ``sc://`` URL as ``;token=...``; a token written into a master URL given as an argument
or in the profile is refused, and :func:`redact` hides tokens in anything shown.

This module is core: it imports neither Spark nor the engines.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model.errors import RestreamError

__all__ = [
    "SparkTarget",
    "resolve",
    "parse_conf",
    "profile_path",
    "redact",
    "with_token",
    "TOKEN_ENV",
    "DEFAULT_EXECUTOR_WAIT",
]

#: The only place a Spark Connect token is read from.
TOKEN_ENV = "RESTREAM_CONNECT_TOKEN"
#: Seconds a replay waits for a cluster to give it executors (or give them back) before failing.
DEFAULT_EXECUTOR_WAIT = 30.0

_TOKEN = re.compile(r"(;\s*token\s*=)[^;]*", re.IGNORECASE)


@dataclass(frozen=True)
class SparkTarget:
    """A resolved master URL (``None``: whatever session the process has, else ``local[*]``),
    Spark settings, seconds to wait for executors, and where each came from."""

    master: str | None
    conf: dict[str, str] = field(default_factory=dict)
    executor_wait: float = DEFAULT_EXECUTOR_WAIT
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def shown_master(self) -> str | None:
        """The master URL with any token hidden."""
        return redact(self.master) if self.master else None


def redact(text: str) -> str:
    """``text`` with every ``;token=...`` parameter replaced by ``;token=***``."""
    return _TOKEN.sub(r"\1***", text)


def parse_conf(text: str, where: str = "RESTREAM_SPARK_CONF") -> dict:
    """Spark settings from a JSON object or ``k=v,k=v`` text (``where`` names it in errors)."""
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RestreamError(
                f"{where}: not valid JSON ({exc.msg}, column {exc.colno})"
            ) from None
        return {str(k): _text(v) for k, v in value.items()}
    out = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise RestreamError(f"{where}: {part.strip()!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def profile_path() -> Path:
    """The profile file's path (which need not exist)."""
    if os.environ.get("RESTREAM_PROFILE"):
        return Path(os.environ["RESTREAM_PROFILE"]).expanduser()
    if os.environ.get("RESTREAM_HOME"):
        return Path(os.environ["RESTREAM_HOME"]) / "profile.toml"
    return Path.home() / ".restream" / "profile.toml"


def _profile() -> tuple[dict[str, Any], str]:
    path = profile_path()
    if not path.is_file():
        return {}, str(path)
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RestreamError(f"{path}: not a valid TOML profile ({exc})") from None
    unknown = sorted(set(data) - {"master", "conf", "executor_wait"})
    if unknown:
        raise RestreamError(f"{path}: unknown profile key {unknown[0]!r}")
    if "conf" in data and not isinstance(data["conf"], dict):
        raise RestreamError(f"{path}: [conf] must be a table of Spark settings")
    return data, str(path)


def _no_token(master: str, where: str) -> None:
    if _TOKEN.search(master):
        raise RestreamError(
            f"{where}: a Spark Connect token does not belong in the master URL; "
            f"set it in the environment variable {TOKEN_ENV} instead"
        )


def resolve(
    master: str | None = None,
    conf: Mapping[str, Any] | None = None,
    executor_wait: float | None = None,
) -> SparkTarget:
    """The master, Spark settings and executor wait from arguments, then the environment, then
    the profile file (see the module docstring); a Connect token from the environment only."""
    profile, where = _profile()
    sources: dict[str, str] = {}
    if master:
        _no_token(master, "master")
        sources["master"] = "argument"
    elif os.environ.get("RESTREAM_MASTER") or os.environ.get("RESTREAM_SPARK_MASTER"):
        master = os.environ.get("RESTREAM_MASTER") or os.environ["RESTREAM_SPARK_MASTER"]
        sources["master"] = "environment"
    elif profile.get("master"):
        master = str(profile["master"])
        _no_token(master, where)
        sources["master"] = where
    settings = {str(k): _text(v) for k, v in (profile.get("conf") or {}).items()}
    settings.update(parse_conf(os.environ.get("RESTREAM_SPARK_CONF", ""), "RESTREAM_SPARK_CONF"))
    settings.update({str(k): _text(v) for k, v in (conf or {}).items()})
    wait = executor_wait
    if wait is None and os.environ.get("RESTREAM_EXECUTOR_WAIT"):
        wait = _seconds(os.environ["RESTREAM_EXECUTOR_WAIT"], "RESTREAM_EXECUTOR_WAIT")
    if wait is None and "executor_wait" in profile:
        wait = _seconds(profile["executor_wait"], f"{where}: executor_wait")
    token = os.environ.get(TOKEN_ENV)
    if master and master.startswith("sc://") and token and not _TOKEN.search(master):
        master = with_token(master, token)
        sources["token"] = TOKEN_ENV
    return SparkTarget(
        master=master,
        conf=settings,
        executor_wait=DEFAULT_EXECUTOR_WAIT if wait is None else wait,
        sources=sources,
    )


def with_token(master: str, token: str) -> str:
    """``sc://host:port`` with ``;token=...`` in the parameter part Spark Connect parses."""
    head, _, params = master.partition(";")
    if "/" not in head[len("sc://") :]:
        head += "/"
    params = ";".join(p for p in params.split(";") if p)
    return f"{head};{params + ';' if params else ''}token={token}"


def _seconds(value: Any, where: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise RestreamError(f"{where}: {value!r} is not a number of seconds") from None
    if seconds <= 0:
        raise RestreamError(f"{where}: must be more than 0 seconds, not {value!r}")
    return seconds
