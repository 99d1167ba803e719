"""Durable writes for the catalog and checkpoints: files written private and synced to disk,
and directories synced after a rename, so a crash leaves the old version or the new one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["synced_file", "write_synced", "fsync_path"]


@contextlib.contextmanager
def synced_file(path: Path, *, exclusive: bool = False) -> Iterator[BinaryIO]:
    """Open ``path`` for writing (mode 0600) and sync it to disk when the block ends.

    ``exclusive``: the file must not exist yet (a name no other writer may share); otherwise
    an existing file is truncated.
    """
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    with os.fdopen(os.open(path, flags, 0o600), "wb") as f:
        yield f
        f.flush()
        os.fsync(f.fileno())


def write_synced(path: Path, data: bytes, *, exclusive: bool = False) -> None:
    """Write ``data`` to ``path`` as :func:`synced_file` does."""
    with synced_file(path, exclusive=exclusive) as f:
        f.write(data)


def fsync_path(path: Path) -> None:
    """Sync a file or a directory (its entries, after a rename); where the file system
    refuses, the write stands unsynced rather than failing."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
