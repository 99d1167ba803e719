"""The social-network log generator and the committed sample made with it."""

from __future__ import annotations

import importlib
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import restream_kit as rk

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # sample_data is a folder of the repository, not installed
    sys.path.insert(0, str(ROOT))
social = importlib.import_module("sample_data.social")

SAMPLE = ROOT / "sample_data" / "social_small.parquet"
README = ROOT / "sample_data" / "README.md"


def top_sender_share(table: pa.Table) -> float:
    messages = pl.from_arrow(table).filter(pl.col("kind") == "message")
    counts = messages.group_by("src").len()
    return counts["len"].max() / messages.height


def documented_command() -> list[str]:
    """The command in sample_data/README.md that made social_small.parquet."""
    lines = [
        line for line in README.read_text().splitlines() if "--out sample_data/social_small" in line
    ]
    assert len(lines) == 1, "README.md should give one command that writes social_small.parquet"
    return shlex.split(lines[0])


def test_same_seed_same_table_and_other_seed_other_table():
    first = social.generate(5_000, seed=7)
    assert first.equals(social.generate(5_000, seed=7))
    assert not first.equals(social.generate(5_000, seed=8))


def test_schema_kinds_and_nulls():
    table = social.generate(20_000, users=300, seed=1)
    assert table.schema == social.SCHEMA
    assert table.column_names == ["ts", "kind", "src", "dst", "ip", "has_email"]
    df = pl.from_arrow(table)
    assert set(df["kind"].unique()) == {"friendship", "message"}
    friendships = df.filter(pl.col("kind") == "friendship")
    messages = df.filter(pl.col("kind") == "message")
    assert 0.07 < friendships.height / df.height < 0.13
    assert friendships["ip"].null_count() == friendships.height
    assert friendships["has_email"].null_count() == friendships.height
    assert messages["ip"].null_count() == 0 and messages["has_email"].null_count() == 0
    assert messages["ip"].str.contains(r"^10\.\d{1,3}\.\d{1,3}\.\d{1,3}$").all()
    assert df["src"].min() >= 1 and df["src"].max() <= 300
    assert df["dst"].min() >= 1 and df["dst"].max() <= 300
    assert (df["src"] != df["dst"]).all()


def test_time_starts_in_2026_never_decreases_and_has_ties():
    ts = social.generate(200_000, seed=2).column("ts").to_numpy()
    assert social.START_MS <= ts[0] < social.START_MS + 60_000
    gaps = np.diff(ts)
    assert (gaps >= 0).all()
    assert 0 < (gaps == 0).sum() < 0.05 * len(gaps)
    span_days = (ts[-1] - ts[0]) / 86_400_000
    assert 0.4 < span_days < 0.8  # 1M events would span about three days


def test_users_mostly_send_from_a_few_ips():
    df = pl.from_arrow(social.generate(100_000, seed=3)).filter(pl.col("kind") == "message")
    per_sender = df.group_by("src").agg(
        pl.len().alias("messages"), pl.col("ip").n_unique().alias("ips")
    )
    busy = per_sender.filter(pl.col("messages") >= 50)
    assert busy.height > 10
    assert busy["ips"].max() <= 3


@pytest.mark.parametrize("alpha", [1.1, 1.5, 2.0])
def test_any_alpha_from_1_1_to_2_works(alpha):
    table = social.generate(10_000, alpha=alpha, users=500, seed=4)
    assert table.num_rows == 10_000
    assert 0 < top_sender_share(table) < 1


def test_higher_alpha_concentrates_messages_on_the_top_sender():
    shares = [top_sender_share(social.generate(50_000, alpha=a, seed=5)) for a in (1.1, 1.5, 2.0)]
    assert shares == sorted(shares) and shares[0] < shares[-1], shares
    assert shares[0] < 0.3 and shares[-1] > 0.5


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="alpha"):
        social.generate(10, alpha=0)
    with pytest.raises(ValueError, match="users"):
        social.generate(10, users=1)
    with pytest.raises(ValueError, match="friendship_share"):
        social.generate(10, friendship_share=1.5)


def test_committed_sample_is_what_the_documented_command_makes(tmp_path):
    command = documented_command()
    assert command[command.index("--out") + 1] == "sample_data/social_small.parquet"
    command[command.index("--out") + 1] = str(tmp_path / "again.parquet")
    command[0] = sys.executable  # the README says .venv/bin/python
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    committed = pq.read_table(SAMPLE)
    again = pq.read_table(tmp_path / "again.parquet")
    assert committed.num_rows == 50_000
    assert committed.equals(again), "regenerate social_small.parquet with the README's command"
    assert SAMPLE.stat().st_size < 5_000_000


def test_antispam_example_flags_some_senders_but_not_most(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / ".restream"))
    result = rk.replay("examples/antispam.py", "sample_data/social_small.parquet")
    flagged = result["spam"]["sender"].n_unique()
    senders = pl.read_parquet(SAMPLE).filter(pl.col("kind") == "message")["src"].n_unique()
    assert 1 <= flagged < senders / 2, (flagged, senders)
