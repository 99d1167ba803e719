"""What a ``restream replay`` process imports: only what its work needs (issue 32).

Each command is a real process (``python -m restream_kit ...``, through a wrapper that lists
``sys.modules`` when it exits). pandas (0.35 s), DuckDB, ``pyarrow.dataset`` and the notebook
libraries would cost every run of the command line, and a serial replay or a ``--reuse``
re-replay needs none of them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SAMPLE = "sample_data/social_small.parquet"
#: Never imported by a serial replay or a re-replay of one.
NOT_NEEDED = ("pandas", "duckdb", "pyarrow.dataset", "plotly", "ipywidgets", "pyspark")


#: ``python -m restream_kit ARGS`` that writes, when it exits, the modules it imported and
#: ``pool:NAME``, the Arrow memory pool it used.
_WRAPPER = """
import atexit, runpy, sys

def listed(path=sys.argv[1]):
    pool = sys.modules["pyarrow"].default_memory_pool().backend_name
    open(path, "w").write("\\n".join([*sys.modules, "pool:" + pool]))

atexit.register(listed)
sys.argv = ["restream", *sys.argv[2:]]
runpy.run_module("restream_kit", run_name="__main__", alter_sys=True)
"""


def imported(*args: str, cwd, home, **env: str) -> tuple[set[str], str]:
    """The modules a ``restream`` process imported (and its pool), and what it printed."""
    listed = home.parent / "modules.txt"
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, str(listed), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={**os.environ, "RESTREAM_HOME": str(home), **env},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    names = set(listed.read_text().split())
    assert "restream_kit.cli.main" in names
    return names, done.stdout


@pytest.fixture(scope="module")
def home(root, tmp_path_factory):
    """A catalog holding run ``v1`` of the anti-spam rule, with its history (this first run
    also writes the log's ordered copy, once: a one-off that may import what it needs)."""
    home = tmp_path_factory.mktemp("imports") / "home"
    args = ("replay", "examples/antispam.py", "--log", SAMPLE, "--name", "v1", "--history")
    imported(*args, cwd=root, home=home)
    return home


def test_serial_replay_imports_neither_pandas_nor_duckdb(root, home):
    names, out = imported("replay", "examples/antispam.py", "--log", SAMPLE, cwd=root, home=home)
    assert out.startswith("replayed 50,000 events on serial"), out
    # Nor polars (its tables are Arrow's, its emit schemas too) nor networkx (no plan).
    unneeded = {*NOT_NEEDED, "polars", "networkx"}
    assert not names & unneeded, sorted(names & unneeded)


def test_reuse_replay_imports_neither_pandas_nor_duckdb(root, home, tmp_path):
    v2 = tmp_path / "antispam_v2.py"
    v2.write_text((root / "examples" / "antispam.py").read_text().replace("0.2 *", "0.3 *"))
    names, out = imported("replay", str(v2), "--log", SAMPLE, "--reuse", "v1", cwd=root, home=home)
    assert "reused from v1: befriend, tally_sender, tally_ip; re-ran: flag" in out, out
    assert not names & set(NOT_NEEDED), sorted(names & set(NOT_NEEDED))


def test_arrow_buffers_come_from_jemalloc_unless_the_user_chose(root, home, monkeypatch):
    """jemalloc keeps freed pages for reuse (restream_kit/cli/_arrow_pool.py); a pool set in
    ``ARROW_DEFAULT_MEMORY_POOL`` is the user's choice and stays."""
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    args = ("replay", "examples/antispam.py", "--log", SAMPLE, "--quiet")
    assert "pool:jemalloc" in imported(*args, cwd=root, home=home)[0]
    chosen = imported(*args, cwd=root, home=home, ARROW_DEFAULT_MEMORY_POOL="system")[0]
    assert "pool:system" in chosen and "pool:jemalloc" not in chosen


def test_pandas_imported_later_converts_as_usual():
    """Once pandas is imported (a handler, Spark), pyarrow converts pandas objects as it does
    in a process that imported pandas first: nanosecond times, categoricals as dictionaries."""
    code = textwrap.dedent(
        """
        import sys
        import pyarrow as pa
        from restream_kit.cli._lazy_pandas import defer_pandas

        defer_pandas()
        assert pa.array([1, 2]).to_pylist() == [1, 2] and "pandas" not in sys.modules
        import pandas as pd

        times = pa.array(pd.Series(pd.to_datetime(["2026-01-01", "2026-01-02"])))
        kinds = pa.array(pd.Series(["a", "b", "a"], dtype="category"))
        print(times.type, pa.types.is_dictionary(kinds.type), type(pd.__loader__).__name__)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["timestamp[ns]", "True", "SourceFileLoader"]
