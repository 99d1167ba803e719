"""One Parquet file read whole (or some of its columns), without ``pyarrow.dataset``.

``pyarrow.parquet.read_table`` goes through ``pyarrow.dataset``, whose import pulls in pandas:
about 0.3 s of every command that reads a run, a history or the catalog index, for files that
are single Parquet files written by this package. ``ParquetFile.read`` gives the same table
(schema, metadata and values) without it. Directories of Parquet files (a partitioned log) are
still read through the dataset reader, where it is the tool for the job.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["read_parquet"]


def read_parquet(path: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """The table in the Parquet file at ``path`` (only ``columns``, when given)."""
    with pq.ParquetFile(path) as file:
        return file.read(columns=list(columns) if columns is not None else None, use_threads=False)
