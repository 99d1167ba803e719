"""Make restream_kit importable on the workers of a remote cluster.

In local mode the workers are forks of this machine's Python, where restream_kit is installed
already. A remote cluster needs the package shipped: :func:`ship` zips it (:func:`package_zip`)
and adds the zip to the workers' Python path, once per session: ``addPyFile`` on a standalone
cluster (``spark://``), ``addArtifacts(..., pyfile=True)`` over Spark Connect (``sc://``, where
there is no SparkContext). Programs themselves never need shipping: their source text travels
with each task (``_program_ref.ProgramRef``), whether it came from a file or a notebook cell.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from ._session import is_connect

__all__ = ["package_zip", "ship", "is_local"]

_SHIPPED: set[int] = set()


def is_local(session: Any) -> bool:
    """True when the session's workers run on this machine (``local`` masters)."""
    try:
        return session.sparkContext.master.startswith("local")
    except Exception:  # noqa: BLE001 - Spark Connect: the server's workers are remote
        return False


def package_zip(directory: str | Path | None = None) -> Path:
    """A zip of the restream_kit package (Python files only), written under ``directory``."""
    package = Path(__file__).resolve().parents[3]  # restream_kit/engines/spark/session/
    out_dir = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="restream-ship-"))
    target = out_dir / "restream_kit.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package.rglob("*.py")):
            archive.write(path, Path("restream_kit") / path.relative_to(package))
    return target


def ship(session: Any) -> None:
    """Put restream_kit on the workers' Python path, unless they run locally or have it."""
    if is_local(session) or id(session) in _SHIPPED or os.environ.get("RESTREAM_NO_SHIP"):
        return

    archive = str(package_zip())
    if is_connect(session):
        session.addArtifacts(archive, pyfile=True)
    else:
        session.sparkContext.addPyFile(archive)
    _SHIPPED.add(id(session))
