"""Results behave like DataFrames, and the sample logs are reachable by name from anywhere."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import polars as pl
import pytest

import restream_kit as rk
from restream_kit.io.samples import SAMPLES

HEADER = "from restream_kit import state, on, emit\n"

PROGRAM = HEADER + textwrap.dedent(
    """
    seen = state.Counter()

    @on("message")
    def count(e):
        seen[e.src] += 1
        emit("counts", who=e.src, n=seen[e.src])
        if seen[e.src] > 10**9:
            emit("never", who=e.src, ip=e.ip, big=seen[e.src] > 5, label=f"u{e.src}",
                 ratio=seen[e.src] / 2, when=e.ts, mystery=seen[e.src])
    """
)


@pytest.fixture(scope="module")
def result() -> rk.Result:
    return rk.replay(PROGRAM, "social_small")


def test_an_unknown_table_raises_key_error_naming_the_tables(result):
    with pytest.raises(
        KeyError, match=r"no output table 'nope'; the tables are: 'counts', 'never'"
    ):
        result["nope"]
    assert "counts" in result and "never" in result and "nope" not in result
    assert list(result) == ["counts", "never"]


def test_a_table_that_emitted_nothing_keeps_its_typed_columns(result):
    never = result["never"]
    assert never.height == 0
    assert never.schema == pl.Schema(
        {
            "lsn": pl.Int64,
            "ts": pl.Int64,
            "time": pl.Datetime("ms", "UTC"),
            "handler": pl.String,
            "seq": pl.Int64,
            "who": pl.Int64,  # e.src: the log's column type
            "ip": pl.String,
            "big": pl.Boolean,
            "label": pl.String,
            "ratio": pl.Float64,
            "when": pl.Int64,
            "mystery": pl.Null,  # a state value: its type is not in the text
        }
    )
    # The engine's own tables are untouched: the empty table is not one of them.
    assert "never" not in result.tables


def test_tables_carry_time_beside_ts_as_a_utc_datetime(result):
    counts = result["counts"]
    assert counts.columns[:3] == ["lsn", "ts", "time"]
    first = counts.row(0, named=True)
    assert first["time"] == dt.datetime.fromtimestamp(first["ts"] / 1000, tz=dt.UTC)
    # Arrow tables, what engines are compared on, stay as the engine made them.
    assert "time" not in result.tables["counts"].column_names


def test_an_emitted_time_field_wins_over_the_derived_column():
    r = rk.replay(
        HEADER + '@on("message")\ndef f(e):\n    emit("t", time="mine")\n',
        [{"ts": 5, "kind": "message"}],
    )
    assert r["t"].columns == ["lsn", "ts", "handler", "seq", "time"]
    assert r["t"]["time"].to_list() == ["mine"]


def test_the_repr_is_short_and_says_engine_status_rows_and_time(result):
    text = repr(result)
    lines = text.splitlines()
    assert lines[0].startswith("<Result serial · ok · 50,000 events in ")
    assert f"  counts: {result.tables['counts'].num_rows:,} rows (who, n)" in text
    assert "  never: 0 rows (who, ip, big, label, ratio, when, ...)" in text
    assert "state keys: seen " in text
    assert len(text) < 600  # not the state, not the Arrow tables


def test_plotting_a_result_works_out_of_the_box(result):
    chart = result["counts"].head(100).plot.line(x="time", y="n")
    spec = chart.to_dict()
    assert spec["mark"]["type"] == "line"
    assert spec["encoding"]["x"]["field"] == "time"


def test_write_records_where_the_tables_went(result, tmp_path):
    written = result.write(tmp_path / "out")
    assert Path(written["counts"]).exists()
    assert f"· {tmp_path / 'out'}>" in repr(result).splitlines()[0]


# -- sample data --------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SAMPLES))
def test_every_sample_is_reachable_by_name(name):
    path = rk.sample_data(name)
    assert path.exists()
    log = rk.Log(name)
    assert len(log) > 0
    assert log.fingerprint == rk.Log(path).fingerprint


def test_a_sample_of_several_streams_is_its_streams_in_order(root):
    by_name = rk.Log("adclicks_small")
    folder = root / "sample_data" / "adclicks_small"
    spelled_out = rk.Log(
        [f"impressions={folder}/impressions.parquet", f"clicks={folder}/clicks.parquet"]
    )
    assert by_name.kinds == ["impressions", "clicks"]
    assert by_name.table.equals(spelled_out.table)
    assert rk.Log("adclicks_small/clicks").kinds == ["clicks"]


def test_an_unknown_sample_name_lists_the_samples():
    with pytest.raises(
        rk.LogError, match="no log file or sample log called 'socal_small'.*social_small"
    ):
        rk.Log("socal_small")
    with pytest.raises(rk.LogError, match="no sample log called 'nope'"):
        rk.sample_data("nope")


def test_sample_names_work_from_any_folder(tmp_path):
    # Not the repository: a notebook copied elsewhere.
    script = (
        "import restream_kit as rk\n"
        "r = rk.replay(rk.sample_data('social_small').parent.parent / 'examples' / 'antispam.py',"
        " 'social_small')\n"
        "print(r['spam'].height)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0


def test_the_sample_files_are_package_data(root):
    # Every file a sample name stands for is installed with the sample_data package.
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = config["package-data"]["sample_data"]
    packaged = {p for pattern in patterns for p in (root / "sample_data").glob(pattern)}
    for files in SAMPLES.values():
        for f in files:
            assert root / "sample_data" / f in packaged, f
