"""What a re-replay reads: only the re-run handlers' events and fields, streamed from the log's
ordered copy (never the whole log), and only the history probes that serve them; the result is
still a full replay's (docs/iterate.md, "Re-replay: what it costs")."""

from __future__ import annotations

import pyarrow as pa
import pytest

import restream_kit as rk
from restream_kit.cli import main as cli
from restream_kit.history.recorder import RecordedProbe
from restream_kit.io import _ordered

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

SOCIAL = "sample_data/social_small.parquet"
ANTISPAM = rk.sample_program("antispam").read_text()
STRICTER = ANTISPAM.replace("0.2 * ip_msgs", "0.3 * ip_msgs")
# The flag handler as a call the loop cannot inline (it takes the event whole): the
# re-replay then needs named events, so every field.
HELPER = STRICTER.replace(
    'emit("spam", sender=e.src)', 'emit("spam", sender=sender_of(e))'
).replace(
    '@on("message")\ndef flag', 'def sender_of(e):\n    return e.src\n\n\n@on("message")\ndef flag'
)


def assert_same(got: rk.Result, want: rk.Result) -> None:
    assert list(got.tables) == list(want.tables)
    for name, table in want.tables.items():
        assert got.tables[name].equals(table), name
    assert got.state == want.state


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """v1 recorded with its history in a fresh catalog; what re-replays then read."""
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path / ".restream"))
    (tmp_path / "v1.py").write_text(ANTISPAM)
    argv = ["replay", str(tmp_path / "v1.py"), "--log", SOCIAL, "--quiet", "--history"]
    assert cli([*argv, "--name", "v1"]) == 0
    reads: dict[str, list] = {"columns": [], "probes": []}
    tables, probe_read = _ordered.OrderedCopy.tables, RecordedProbe._read

    def spy_tables(self, *args, **kwargs):
        reads["columns"].append(kwargs.get("columns", args[2] if len(args) > 2 else None))
        return tables(self, *args, **kwargs)

    def spy_read(self):
        if self._values is None:
            reads["probes"].append(self.signature.state)
        return probe_read(self)

    monkeypatch.setattr(_ordered.OrderedCopy, "tables", spy_tables)
    monkeypatch.setattr(RecordedProbe, "_read", spy_read)
    monkeypatch.setattr(
        rk.Log, "table", property(lambda _self: pytest.fail("the log was read whole"))
    )
    return reads


def test_a_rereplay_reads_only_the_rerun_fields_and_the_probes_it_serves(recorded):
    want = rk.replay(STRICTER, SOCIAL)
    recorded["columns"].clear()
    got = rk.replay(STRICTER, SOCIAL, reuse="v1")
    assert got.reuse["rerun_stages"] == ["flag"] and got.reuse["rerun_as"] == "columns"
    assert_same(got, want)
    # flag names e.src and e.ip: neither dst nor has_email is read, and no other pass (kind
    # only to keep the messages: the column run does not need it, all its handlers' kinds).
    assert [sorted(read) for read in recorded["columns"]] == [["ip", "kind", "lsn", "src", "ts"]]
    # tally_sender's read of friends is reused with it: its probe stays on disk.
    assert sorted(recorded["probes"]) == ["ip_emails", "ip_msgs", "to_friends", "to_strangers"]


def test_a_rerun_handler_that_takes_the_event_whole_gets_every_field(recorded):
    want = rk.replay(HELPER, SOCIAL)
    assert want.metrics.rows["spam"] > 0
    recorded["columns"].clear()
    got = rk.replay(HELPER, SOCIAL, reuse="v1")
    assert got.reuse["rerun_stages"] == ["flag"] and got.reuse["rerun_as"] == "loop"
    assert_same(got, want)
    assert recorded["columns"][-1] is None or "has_email" in recorded["columns"][-1]


def test_log_select_keeps_the_rows_of_the_kinds_and_the_columns_asked(tmp_path):
    log = rk.Log(SOCIAL, cache_dir=tmp_path / "logs")
    whole = rk.Log(rk.Log(SOCIAL).table)  # in memory: filtered, not streamed
    expected = log.ordered().path
    assert expected.exists()
    for kinds, columns in [
        (["friendship"], ["lsn", "ts", "kind", "dst"]),
        (["message"], ["ip", "src", "lsn"]),
        (["message", "friendship"], None),
        (["nothing"], ["lsn", "ip"]),
    ]:
        got = log.select(kinds, columns)
        table = whole.table
        mask = [k in kinds for k in table.column("kind").to_pylist()]
        want = table.filter(mask)
        keep = [c for c in table.column_names if columns is None or c in columns]
        assert got.schema == want.select(keep).schema  # text stays text, not dictionaries
        assert got.to_pylist() == want.select(keep).to_pylist()
        assert whole.select(kinds, columns).to_pylist() == got.to_pylist()
        # Text left as dictionaries (for the caller to decode what it uses): the same values.
        coded = log.select(kinds, columns, text=False)
        assert coded.to_pylist() == got.to_pylist()
        if columns and "ip" in columns and kinds != ["message", "friendship"]:
            assert coded.schema.field("ip").type == pa.dictionary(pa.int32(), pa.string())
    assert not log.loaded
