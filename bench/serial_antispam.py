"""The serial engine's side: ``restream_kit.replay("examples/antispam.py", LOG)``, nothing more.

``python -m bench.serial_antispam LOG.parquet [--dump ROWS.json]`` replays the log through the
example program and prints the row count and a digest of the spam rows (see ``bench.rows``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.rows import report
from restream_kit import replay

__all__ = ["PROGRAM", "main"]

PROGRAM = Path(__file__).resolve().parents[1] / "examples" / "antispam.py"


def main(argv: list[str]) -> int:
    """Replay the log ``argv[0]`` through the anti-spam example and print what it found."""
    result = replay(str(PROGRAM), argv[0])
    spam = result.tables.get("spam")
    lsns = spam.column("lsn").to_pylist() if spam is not None else []
    senders = spam.column("sender").to_pylist() if spam is not None else []
    dump = argv[argv.index("--dump") + 1] if "--dump" in argv else None
    report(lsns, senders, dump)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
