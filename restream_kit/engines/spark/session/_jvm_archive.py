"""A class-data-sharing archive for the Spark driver's JVM: sessions start in about half the time.

A Spark driver loads and verifies some 10,000 classes before its first job; on a two-core
machine that is most of the seconds a session takes to start. Java's class-data sharing (a
*dynamic archive*, JDK 13+) stores those classes, parsed and verified, in one file that later
JVMs map instead. The archive is made once per Java and Spark installation (``make setup``
calls :func:`main`; ``--force`` rebuilds): a small
replay on both Spark paths runs with ``-XX:ArchiveClassesAtExit``, and the JVM writes the
archive as it exits.

New local and standalone sessions then start their driver with ``-XX:SharedArchiveFile``
(:func:`java_options`). The archive's name is a fingerprint of the Java home and of Spark's
jars, so another Java or Spark never picks up a stale one; a JVM that still finds it does not
match (a jar replaced in place) ignores it, silently, and starts the slow way.
``RESTREAM_JVM_ARCHIVE=0`` turns it off; ``RESTREAM_JVM_ARCHIVE_DIR`` moves it (default
``$XDG_CACHE_HOME/restream_kit/jvm``, else ``~/.cache/restream_kit/jvm``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from ....io.samples import sample_data, sample_program
from ..java import ensure_java_home

__all__ = ["archive_path", "java_options", "build", "main", "training_inputs"]

#: Keeps the JVM quiet about classes it cannot archive (signed jars, generated code) and about
#: an archive it cannot use.
_QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def _enabled() -> bool:
    return os.environ.get("RESTREAM_JVM_ARCHIVE", "1") != "0"


def _archive_dir() -> Path:
    if os.environ.get("RESTREAM_JVM_ARCHIVE_DIR"):
        return Path(os.environ["RESTREAM_JVM_ARCHIVE_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "restream_kit" / "jvm"


def _fingerprint() -> str:
    """What the archive depends on: the Java (its home and release) and Spark's jars."""
    import pyspark

    digest = hashlib.sha256()
    home = Path(os.path.realpath(ensure_java_home()))
    digest.update(str(home).encode())
    release = home / "release"
    if release.exists():
        digest.update(release.read_bytes())
    jars = Path(pyspark.__file__).parent / "jars"
    digest.update(str(jars).encode())
    for jar in sorted(jars.glob("*.jar")):
        info = jar.stat()
        digest.update(f"{jar.name}:{info.st_size}:{info.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def archive_path() -> Path:
    """Where this Java and Spark's archive is (whether or not it exists yet)."""
    return _archive_dir() / f"spark-{_fingerprint()}.jsa"


def java_options() -> list[str]:
    """The driver JVM's options that use the archive: none when there is none (or it is off)."""
    if not _enabled():
        return []
    try:
        path = archive_path()
    except Exception:  # noqa: BLE001 - no Java or no Spark: the session reports that itself
        return []
    return [f"-XX:SharedArchiveFile={path}", *_QUIET] if path.exists() else []


#: Run in a child process: a session whose JVM writes the archive on exit, and a small replay
#: on each Spark path so that the classes a replay needs are loaded by then.
_TRAINING = """
import os, sys
import pyarrow.parquet as pq
from restream_kit import replay
from restream_kit.engines.spark import get_session
target, program, log = sys.argv[1:4]
log = pq.read_table(log).slice(0, 3000)
options = "-Dlog4j2.level=ERROR -XX:ArchiveClassesAtExit=" + target + " -Xlog:cds=off"
session = get_session("local[2]", {"spark.driver.extraJavaOptions": options})
pid = session.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
for path in ("prefix", "passes"):
    replay(program, log, engine="spark", path=path, epoch=1000)
print("JVM", pid, flush=True)
session.stop()
"""


def training_inputs() -> tuple[Path, Path]:
    """The program and log the archive is trained on: both ship inside the package, so an
    installed wheel builds the archive as a checkout does."""
    return sample_program("antispam"), sample_data("social_small")


def build(*, force: bool = False, quiet: bool = False, timeout: float = 600) -> Path | None:
    """Make the archive unless it exists; return its path (None when it is turned off).
    Says what it made unless ``quiet``."""
    if not _enabled():
        return None
    path = archive_path()
    if path.exists() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    program, log = training_inputs()
    started = time.perf_counter()
    try:
        _train(tmp, program, log, timeout)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # a failed or timed-out build leaves no half-written file
    if not quiet:
        size = path.stat().st_size / 2**20
        print(f"JVM archive: {path} ({size:.0f} MiB, {time.perf_counter() - started:.0f} s)")
    return path


def _train(tmp: Path, program: Path, log: Path, timeout: float) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _TRAINING, str(tmp), str(program), str(log)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    pid = next(
        (int(line.split()[1]) for line in out.stdout.splitlines() if line.startswith("JVM ")),
        None,
    )
    if out.returncode != 0 or pid is None:
        raise RuntimeError(f"building the JVM archive failed:\n{out.stderr[-3000:]}")
    # The JVM writes the archive as it exits, after this process's child has gone.
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if not tmp.exists() or tmp.stat().st_size == 0:
        raise RuntimeError(f"the JVM exited without writing its archive to {tmp}")


def main(argv: list[str] | None = None) -> int:
    """Build the archive from the command line: ``main(["--force"])`` rebuilds it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if it exists")
    args = parser.parse_args(argv)
    if build(force=args.force) is None:
        print("JVM archive: turned off (RESTREAM_JVM_ARCHIVE=0)")
    return 0
