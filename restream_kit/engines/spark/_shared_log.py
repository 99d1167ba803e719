"""A file log on a cluster: its ordered copy put where every executor reads it, once.

On a local master the executors share the kernel's disk and read the log's ordered copy
where it lies (``io._ordered``, ``passes._setup``). A cluster's executors do not: before
this, the pass path built the whole log in the kernel (``Log.table``) and sent it to them
(``createDataFrame``). Now, with a *shared directory* (``$RESTREAM_SHARED_DIR``: a directory
every worker mounts, or a URI Hadoop reads, ``hdfs://``, ``s3a://``...), the kernel copies
the ordered copy there once per log (``<fingerprint>.parquet``: streamed from disk, a new
name for a changed log) and Spark's reader reads it on the executors: nothing of the log
goes through the kernel's memory; on the prefix path, the epochs' tasks read their rows of it
where the directory is a mount (a path or ``file://``) instead of getting them from the kernel
(``prefix._driver``). Without one, a log of fewer than
``$RESTREAM_SENT_LOG_ROWS`` events (default :data:`SENT_ROWS`) is sent from the kernel as
before, and a larger one is one clear error saying what to set.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ...io.log import Log
from ...model.errors import RestreamError

__all__ = ["SHARED_DIR", "SENT_ROWS", "shared_dir", "shared_copy", "shared_file", "check_sent"]

#: The setting naming the shared directory (a path or a URI).
SHARED_DIR = "RESTREAM_SHARED_DIR"
#: Without a shared directory, the largest log (in events) the kernel sends a cluster.
SENT_ROWS = 1_000_000


def shared_dir() -> str | None:
    """The shared directory the user set, or None."""
    return os.environ.get(SHARED_DIR) or None


def check_sent(log: Log, master: str) -> None:
    """Refuse to send a large file log from the kernel to the cluster at ``master`` when
    no shared directory is set (see the module docstring)."""
    limit = int(os.environ.get("RESTREAM_SENT_LOG_ROWS", SENT_ROWS))
    if shared_dir() is None and log.uri is None and log.streamed and len(log) >= limit:
        raise RestreamError(
            f"the log has {len(log):,} events, too many to send from the kernel to the "
            f"cluster at {master}: set ${SHARED_DIR} to a directory (or hdfs://, s3a:// ... "
            "URI) every worker can read, where the log's ordered copy is put once, or give "
            "the log as a URI Spark reads"
        )


def shared_copy(session: Any, log: Log) -> str | None:
    """Where the executors read ``log``'s ordered copy in the shared directory (copied
    there if it is not yet), or None without a shared directory or an ordered copy."""
    where = shared_dir()
    if where is None or log.uri is not None or not log.copied:
        return None
    source = log.ordered().path
    name = f"{log.fingerprint}.parquet"
    scheme = urlparse(where).scheme
    if scheme in ("", "file"):
        folder = Path(urlparse(where).path if scheme else where)
        target = folder / name
        if not target.exists():
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".{name}.{os.getpid()}.tmp"
            try:
                shutil.copyfile(source, tmp)
                os.chmod(tmp, 0o644)  # the workers may run as another user
                os.replace(tmp, target)  # whole or not at all: another kernel may copy too
            finally:
                tmp.unlink(missing_ok=True)
        return str(target)
    return _hadoop_copy(session, str(source), where.rstrip("/") + "/" + name)


def shared_file(session: Any, log: Log) -> str | None:
    """The shared copy of ``log`` as a path the workers open with pyarrow (the prefix path's
    tasks): only in a shared directory that is a path or ``file://`` (a mount), else None."""
    where = shared_dir()
    if where is None or urlparse(where).scheme not in ("", "file"):
        return None
    return shared_copy(session, log)


def _hadoop_copy(session: Any, source: str, target: str) -> str:
    """``source`` copied to ``target`` (a URI) through Hadoop's file system in the driver's
    JVM, unless it is there already."""
    sc = getattr(session, "sparkContext", None)
    if sc is None:
        raise RestreamError(
            f"${SHARED_DIR} is the URI {target.rsplit('/', 1)[0]}: over Spark Connect the "
            "kernel cannot write there; give a directory the kernel and the workers mount"
        )
    jvm = sc._jvm  # noqa: SLF001 - Hadoop's FileSystem has no Python API
    path = jvm.org.apache.hadoop.fs.Path(target)
    fs = path.getFileSystem(sc._jsc.hadoopConfiguration())  # noqa: SLF001
    if not fs.exists(path):
        tmp = jvm.org.apache.hadoop.fs.Path(f"{target}.{os.getpid()}.tmp")
        fs.copyFromLocalFile(False, True, jvm.org.apache.hadoop.fs.Path(source), tmp)
        if not fs.rename(tmp, path):
            fs.delete(tmp, False)  # (another kernel put it there first)
    return target
