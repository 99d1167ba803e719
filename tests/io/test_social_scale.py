"""The large social log generator: written a chunk at a time from a fixed population, in time
order or not, with the same events either way."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

import restream_kit as rk
from sample_data import social, social_scale


def test_chunks_continue_in_time_and_keep_to_the_population(tmp_path):
    path = tmp_path / "ordered.parquet"
    stats = social_scale.write_scaled(path, 5_000, users=300, chunk=1_000)
    table = pq.read_table(path)
    assert table.schema == social.SCHEMA
    assert stats["events"] == table.num_rows == 5_000
    ts = table.column("ts").to_numpy()
    assert ts[0] >= social.START_MS and np.all(np.diff(ts) >= 0)
    src = table.column("src").to_numpy()
    assert 1 <= src.min() and src.max() <= 300
    assert pq.ParquetFile(path).metadata.num_row_groups == 5  # written a chunk at a time


def test_unordered_log_has_the_same_events_and_orders_to_the_same_log(tmp_path):
    ordered = tmp_path / "o.parquet"
    shuffled = tmp_path / "u.parquet"
    social_scale.write_scaled(ordered, 3_500, users=200, chunk=1_000, seed=3)
    social_scale.write_scaled(shuffled, 3_500, users=200, chunk=1_000, seed=3, unordered=True)
    raw = pq.read_table(shuffled).column("ts").to_numpy()
    assert np.any(np.diff(raw) < 0)
    a, b = rk.Log(str(ordered)), rk.Log(str(shuffled))
    key = ["ts", "src", "dst", "kind"]
    assert sorted(a.table.select(key).to_pylist(), key=str) == sorted(
        b.table.select(key).to_pylist(), key=str
    )
    assert b.table.column("ts").to_pylist() == a.table.column("ts").to_pylist()
