"""The archive a cluster's workers import restream_kit from (``session._ship.package_zip``)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import restream_kit
from restream_kit.engines.spark.session._ship import package_zip


def test_the_shipped_archive_is_the_whole_package_under_its_own_name(tmp_path):
    package = Path(restream_kit.__file__).resolve().parent
    with zipfile.ZipFile(package_zip(tmp_path)) as archive:
        names = set(archive.namelist())
        top = archive.read("restream_kit/__init__.py").decode()
    assert top == (package / "__init__.py").read_text()
    expected = {f"restream_kit/{p.relative_to(package).as_posix()}" for p in package.rglob("*.py")}
    assert names == expected
    assert "restream_kit/engines/spark/session/_ship.py" in names
