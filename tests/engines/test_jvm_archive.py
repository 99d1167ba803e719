"""The Spark driver's class-data-sharing archive (``restream_kit.engines.spark.session._jvm_archive``).

``make setup`` builds the archive before the tests run; a missing archive fails here, loudly,
rather than leaving every session to start the slow way unnoticed.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from restream_kit.engines.spark.session import _jvm_archive as _jvm_archive
from restream_kit.engines.spark.session._session import default_conf

pytestmark = pytest.mark.spark


def test_setup_built_the_archive_for_this_java_and_spark():
    path = _jvm_archive.archive_path()
    assert path.exists(), f"{path} is missing: run `make setup`"
    assert path.stat().st_size > 10 * 2**20  # thousands of classes, not an empty file


def test_new_sessions_map_the_archive_and_can_be_told_not_to(monkeypatch):
    options = default_conf("local[2]")["spark.driver.extraJavaOptions"]
    assert f"-XX:SharedArchiveFile={_jvm_archive.archive_path()}" in options
    monkeypatch.setenv("RESTREAM_JVM_ARCHIVE", "0")
    assert "SharedArchiveFile" not in default_conf("local[2]")["spark.driver.extraJavaOptions"]
    assert _jvm_archive.build() is None


def test_another_directory_has_no_archive_until_one_is_built(tmp_path, monkeypatch):
    monkeypatch.setenv("RESTREAM_JVM_ARCHIVE_DIR", str(tmp_path))
    assert _jvm_archive.archive_path().parent == tmp_path
    assert _jvm_archive.java_options() == []


def test_the_archive_really_loads_in_a_spark_driver():
    """``-Xshare:on`` makes the JVM refuse to start unless it can map the archive."""
    code = (
        "from restream_kit.engines.spark import get_session\n"
        "from restream_kit.engines.spark.session._session import default_conf\n"
        "options = default_conf('local[1]')['spark.driver.extraJavaOptions'] + ' -Xshare:on'\n"
        "s = get_session('local[1]', {'spark.driver.extraJavaOptions': options})\n"
        "args = s.sparkContext._jvm.java.lang.management.ManagementFactory"
        ".getRuntimeMXBean().getInputArguments()\n"
        "print('ARGS', ' '.join(str(a) for a in args))\n"
        "print('SUM', s.range(0, 100, 1, 1).selectExpr('sum(id)').first()[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "-Xshare:on" in out.stdout and "SharedArchiveFile" in out.stdout
    assert "SUM 4950" in out.stdout
