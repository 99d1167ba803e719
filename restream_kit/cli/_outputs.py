"""``restream replay --out DIR`` when the replay fails: keep what finished epochs produced.

:class:`PartialOutputs` observes the replay and keeps the rows each finished epoch published
(``EpochFinished.outputs``). When the replay stops with an error, ``DIR/<table>.parquet``
gets the rows of the epochs that finished before it (exactly the rows a complete replay has
there, since a finished epoch's rows never change) and ``DIR/ERROR`` says what went wrong
and how far the replay got. A replay that succeeds writes every table in full and removes a
stale ``ERROR``. The epochs are those of ``--epoch``; without it a replay has one epoch, so a
failed replay leaves only ``ERROR``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..io.progress import EpochFinished, ProgressEvent, ReplayStarted

__all__ = ["PartialOutputs", "ERROR_FILE"]

#: The file a failed replay leaves in ``--out DIR``.
ERROR_FILE = "ERROR"


class PartialOutputs:
    """An observer keeping the rows of finished epochs, to write when the replay fails."""

    def __init__(self, out_dir: str | Path):
        self.out = Path(out_dir)
        self.tables: dict[str, list[pa.Table]] = {}
        self.epochs_done = 0
        self.epochs_total = 0
        self.events_done = 0
        self.events_total = 0

    def __call__(self, event: ProgressEvent) -> None:
        if isinstance(event, ReplayStarted):
            # A Spark replay that falls back to the serial algorithm starts over.
            self.tables.clear()
            self.epochs_done = self.events_done = 0
            self.epochs_total, self.events_total = event.epochs_total, event.events_total
        elif isinstance(event, EpochFinished):
            self.epochs_done = event.epoch + 1
            self.events_done = event.events_done
            for name, table in event.outputs.items():
                self.tables.setdefault(name, []).append(table)

    def write_error(self, exc: BaseException) -> list[str]:
        """Write the finished epochs' tables and ``ERROR``; return the files written."""
        self.out.mkdir(parents=True, exist_ok=True)
        written, skipped = [], []
        for name, parts in self.tables.items():
            try:
                table = pa.concat_tables(parts, promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                skipped.append(name)  # the epochs disagree on a field's type
                continue
            pq.write_table(table, self.out / f"{name}.parquet")
            written.append(f"{name}.parquet ({table.num_rows:,} rows)")
        message = str(exc) or type(exc).__name__
        lines = [
            f"error: {message}",
            f"finished epochs: {self.epochs_done} of {self.epochs_total} "
            f"({self.events_done:,} of {self.events_total:,} events)",
            "partial tables: " + (", ".join(written) if written else "none"),
        ]
        if skipped:
            lines.append(
                "not written (a field's type differs between epochs): " + ", ".join(skipped)
            )
        (self.out / ERROR_FILE).write_text("\n".join(lines) + "\n")
        return written

    def clear_error(self) -> None:
        """A replay that succeeded: an ``ERROR`` left by an earlier one no longer applies."""
        (self.out / ERROR_FILE).unlink(missing_ok=True)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"PartialOutputs({self.out}, epochs={self.epochs_done}/{self.epochs_total})"
