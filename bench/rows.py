"""What both sides of a benchmark print about their output, so that the harness can compare."""

from __future__ import annotations

import hashlib
import json
from array import array

__all__ = ["digest", "report"]


def digest(lsns: list[int], senders: list[int]) -> str:
    """A short hash of the output's lsn and sender columns, in order."""
    h = hashlib.sha256(array("q", lsns).tobytes())
    h.update(array("q", senders).tobytes())
    return h.hexdigest()[:16]


def report(lsns: list[int], senders: list[int], dump: str | None = None) -> None:
    """Print one JSON line (row count and digest); with ``dump``, save the columns there too."""
    if dump:
        with open(dump, "w") as out:
            json.dump({"lsn": lsns, "sender": senders}, out)
    print(json.dumps({"rows": len(lsns), "digest": digest(lsns, senders)}))
