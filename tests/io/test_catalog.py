"""The run catalog: many writers at once, SIGKILL mid-write, a damaged index, no pickle anywhere.

Real processes and real files throughout: the stress test runs the notebook magic in an IPython
shell, the command line and background replays in three child processes at once; the kill test
SIGKILLs a recording child at random moments. See docs/catalog.md for the design under test.
"""

from __future__ import annotations

import decimal
import json
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from naive import events, programs, render

import restream_kit as rk
from restream_kit.io.catalog import Catalog, CatalogError
from restream_kit.io.checkpoint import CheckpointError
from restream_kit.io.result import Result
from restream_kit.model import values
from restream_kit.model.errors import StateError

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_data" / "social_small.parquet"
ANTISPAM = rk.sample_program("antispam").read_text()
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "RESTREAM_DISPLAY": "text"}

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")


@pytest.fixture
def small_log(tmp_path) -> str:
    """The first 3,000 events of the social sample: quick replays, the same shape."""
    path = tmp_path / "small.parquet"
    pq.write_table(pq.read_table(SAMPLE).slice(0, 3000), path)
    return str(path)


# -- identical values: equal, and of the same types all the way down ------------------------------


def identical(a, b) -> bool:
    """``a == b`` with the same type at every level (1, 1.0 and True differ; nan is nan)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    if isinstance(a, complex):
        return identical(a.real, b.real) and identical(a.imag, b.imag)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return (
            len(a) == len(b)
            and list(a) == list(b)  # insertion order kept
            and all(identical(k, _same_key(b, k)) and identical(a[k], b[k]) for k in a)
        )
    if isinstance(a, (set, frozenset)):
        return len(a) == len(b) and all(identical(x, _same_key(b, x)) for x in a)
    if isinstance(a, decimal.Decimal):
        return str(a) == str(b)
    return a == b


def _same_key(container, key):
    """The element of ``container`` equal to ``key`` (to compare its type)."""
    return next(k for k in container if k == key)


hashable = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**5000, max_value=2**5001)  # too long for JSON text
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8)
    | st.dates()
    | st.datetimes()
    | st.timedeltas()
    | st.decimals(allow_nan=False),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
any_value = st.recursive(
    hashable | st.floats() | st.complex_numbers() | st.builds(bytearray, st.binary(max_size=4)),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner)
        | st.dictionaries(hashable, inner, max_size=4)
        | st.sets(hashable, max_size=4)
        | st.frozensets(hashable, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=any_value)
def test_the_value_codec_round_trips_every_plain_value_with_its_types(value):
    data = values.dumps(value)
    json.loads(data)  # plain JSON, readable by anything
    assert identical(values.loads(data), value)


def test_the_value_codec_refuses_objects_and_reads_no_code():
    import pickle

    with pytest.raises(values.ValueCodecError, match="function"):
        values.dumps({"k": [1, lambda: 1]})
    with pytest.raises(values.ValueCodecError) as err:
        values.dumps({"a": (1, object())})
    assert err.value.path == "['a'][1]"
    # A pickle, or JSON that names something to build, is refused, never run.
    for data in (
        pickle.dumps({"a": 1}),
        b'["os.system", "true"]',
        b'["fn", {"name": "x"}]',
        b"NaN",
    ):
        with pytest.raises(values.ValueCodecError):
            values.loads(data)


# -- a recorded run loads back equal --------------------------------------------------------------


def assert_same_result(loaded: Result, recorded: Result) -> None:
    assert list(loaded.tables) == list(recorded.tables)
    for name, table in recorded.tables.items():
        assert loaded.tables[name].equals(table), name
    assert identical(
        {k: dict(v) for k, v in loaded.state.items()},
        {k: dict(v) for k, v in recorded.state.items()},
    )
    assert loaded.metrics == recorded.metrics
    assert loaded.schemas == recorded.schemas
    assert loaded.warnings == recorded.warnings
    assert loaded.quarantine.equals(recorded.quarantine)
    assert (loaded.on_error, loaded.resumed_from_epoch) == (
        recorded.on_error,
        recorded.resumed_from_epoch,
    )


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec=programs(), log=events)
def test_a_generated_program_s_run_loads_back_equal(spec, log, tmp_path_factory):
    catalog = Catalog(tmp_path_factory.mktemp("home"))
    program = rk.Program.from_source(render(spec), name="prop")
    log = rk.Log(log, cache=False)
    result = rk.replay(program, log, require_kinds=False)
    record = catalog.record(name="prop", program=program, log=log, engine="serial", result=result)
    assert_same_result(catalog.load(record), result)


STORE_VALUES = """
from restream_kit import emit, on, state
from restream_kit.model import values as _codec

kept = state.Map(default=None)
VALUES = _codec.loads({data!r})

@on("event")
def keep(e):
    kept[e.k] = VALUES[e.k]
    emit("out", k=e.k)
"""


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(stored=st.lists(any_value, min_size=1, max_size=5))
def test_state_values_of_every_kind_survive_a_run_s_record_and_load(stored, tmp_path_factory):
    catalog = Catalog(tmp_path_factory.mktemp("home"))
    program = rk.Program.from_source(
        STORE_VALUES.format(data=values.dumps(stored).decode()), name="store"
    )
    log = rk.Log([{"ts": i, "k": i} for i in range(len(stored))], cache=False)
    result = rk.replay(program, log)
    assert identical(result.state["kept"], dict(enumerate(stored)))
    record = catalog.record(name="store", program=program, log=log, engine="serial", result=result)
    assert_same_result(catalog.load(record), result)


def test_a_state_that_cannot_be_stored_names_state_and_key_and_lists_nothing(tmp_path, small_log):
    catalog = Catalog(tmp_path / "home")
    program = rk.Program.from_source(ANTISPAM, name="v1")
    log = rk.Log(small_log)
    result = rk.replay(program, log)
    result.state["friends"][("x", "y")] = object()
    with pytest.raises(StateError, match=r"state 'friends', key \('x', 'y'\): the value <object"):
        catalog.record(name="v1", program=program, log=log, engine="serial", result=result)
    assert catalog.runs().is_empty()
    assert os.listdir(catalog.runs_dir) == []  # no temporary directory left either


# -- three processes at once: the magic, the command line, background replays --------------------

MAGIC = """
import sys
from IPython.core.interactiveshell import InteractiveShell

ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "restream_kit")
source = open(sys.argv[2]).read()
ids = []
for i in range(20):
    ip.run_cell_magic("restream", f"magic{i} --log {sys.argv[1]}", source)
    cell = ip.user_ns[f"magic{i}"].wait()
    assert cell.ok, cell.error
    ids += [cell.record.run_id] + ([] if cell.baseline.reused else [cell.baseline.record.run_id])
    ip.run_line_magic("restream", "runs")  # reads while the others write
print(" ".join(ids))
"""

CLI = """
import io, sys, contextlib
from restream_kit.io.catalog import Catalog
from restream_kit.cli import main

ids = []
for i in range(20):
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["replay", sys.argv[2], "--log", sys.argv[1], "--quiet", "--name", f"cli{i}"])
    assert code == 0
    ids.append(Catalog().latest(f"cli{i}").run_id)
print(" ".join(ids))
"""

BACKGROUND = """
import sys
from restream_kit.workbench import BackgroundRun, Workbench

bench = Workbench()
source = open(sys.argv[2]).read().replace("> 2 *", "> 3 *")
runs = [BackgroundRun(bench, f"bg{i}", source, sys.argv[1]) for i in range(20)]
ids = set()
for run in runs:
    cell = run.wait(timeout=300)
    assert cell.ok, cell.error
    ids.add(cell.record.run_id)
    if not cell.baseline.reused:
        ids.add(cell.baseline.record.run_id)
print(" ".join(sorted(ids)))
"""


def test_three_processes_record_sixty_runs_at_once_and_none_is_lost(tmp_path, small_log):
    home = tmp_path / "home"
    program = tmp_path / "antispam.py"
    program.write_text(ANTISPAM)
    env = {**ENV, "RESTREAM_HOME": str(home)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", code, small_log, str(program)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for code in (MAGIC, CLI, BACKGROUND)
    ]
    recorded: set[str] = set()
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-3000:]
        assert "conflicting lock" not in err.lower() and "could not set lock" not in err.lower()
        recorded |= set(out.strip().splitlines()[-1].split())  # the ids, printed last
    names = {f"{p}{i}" for p in ("magic", "cli", "bg") for i in range(20)}
    catalog = Catalog(home)
    runs = catalog.runs()
    assert names <= set(runs["name"]) and len(recorded) >= 60
    assert set(runs["run_id"]) == recorded  # every recorded run listed, nothing else
    assert set(runs["status"]) == {"ok"}
    for run_id in runs["run_id"]:
        loaded = catalog.load(run_id)
        assert loaded.tables["spam"].num_rows > 0 and loaded.metrics.events == 3000
    # Another process sees them all, with sizes, through the command line.
    listed = subprocess.run(
        [sys.executable, "-m", "restream_kit", "runs", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert {r["run_id"] for r in rows} == recorded
    assert all(r["size_bytes"] > 1000 and r["size"].endswith("kB") for r in rows)


# -- SIGKILL while recording -----------------------------------------------------------------------

RECORDER = """
import sys
import restream_kit as rk
from restream_kit.io.catalog import Catalog

catalog = Catalog()
program = rk.Program.from_file(sys.argv[2])
log = rk.Log(sys.argv[1])
result = rk.replay(program, log)
# A bigger state makes each record take a while, so that kills land inside writes.
result.state["friends"].update({("pad", i): "x" * 50 for i in range(60_000)})
print("ready", flush=True)
while True:
    catalog.record(name="kill", program=program, log=log, engine="serial", result=result)
    print("recorded", flush=True)
"""


def test_a_recorder_killed_at_random_points_leaves_only_complete_runs(tmp_path, small_log):
    home = tmp_path / "home"
    program = tmp_path / "antispam.py"
    program.write_text(ANTISPAM)
    env = {**ENV, "RESTREAM_HOME": str(home)}
    rng = random.Random(18)
    caught_mid_write = 0
    for attempt in range(4):
        child = subprocess.Popen(
            [sys.executable, "-c", RECORDER, small_log, str(program)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout.readline().strip() == "ready"
        if attempt == 0:
            # One complete run whatever the machine's load, so that "listed" means something.
            assert child.stdout.readline().strip() == "recorded"
        time.sleep(rng.uniform(0.05, 0.8))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        caught_mid_write += any(p.name.startswith(".tmp-") for p in (home / "runs").iterdir())
        catalog = Catalog(home)
        for row in catalog.runs().iter_rows(named=True):
            manifest = catalog.manifest(row["run_id"])
            run_dir = home / "runs" / row["run_id"]
            for rel, size in manifest["files"].items():
                assert (run_dir / rel).stat().st_size == size, (row["run_id"], rel)
            loaded = catalog.load(row["run_id"])
            assert len(loaded.state["friends"]) > 60_000
    assert caught_mid_write >= 1, "no kill landed inside a write: the test proved nothing"
    catalog = Catalog(home)
    listed = len(catalog.runs())
    assert listed >= 1
    # What the killed writers left is swept (their processes are gone) and was never listed.
    assert catalog.sweep() and not [p for p in (home / "runs").iterdir() if p.name[0] == "."]
    assert len(catalog.runs()) == listed


# -- a damaged index -------------------------------------------------------------------------------


def test_a_damaged_index_is_said_in_one_line_and_rebuilt_from_the_runs(tmp_path, small_log):
    home = tmp_path / "home"
    catalog = Catalog(home)
    program = rk.Program.from_source(ANTISPAM, name="v1")
    log = rk.Log(small_log)
    result = rk.replay(program, log)
    ids = [
        catalog.record(name=f"v{i}", program=program, log=log, engine="serial", result=result)
        for i in range(3)
    ]
    assert catalog.path.exists()
    data = catalog.path.read_bytes()
    catalog.path.write_bytes(data[: len(data) // 2])  # a torn write of the index

    env = {**ENV, "RESTREAM_HOME": str(home)}
    listed = subprocess.run(
        [sys.executable, "-m", "restream_kit", "runs"], env=env, capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    err = listed.stderr.strip().splitlines()
    assert len(err) == 1 and "index" in err[0] and "damaged" in err[0] and "rebuilding" in err[0]
    assert all(r.run_id in listed.stdout for r in ids)
    # Rebuilt: the next reader says nothing and sees the same runs.
    again = Catalog(home, quiet=True)
    assert set(again.runs()["run_id"]) == {r.run_id for r in ids} and again.notes == []
    # Garbage with the right name, then an index with other columns: the same.
    for garbage in (b"PAR1 not parquet PAR1", None):
        if garbage is None:
            pq.write_table(pq.read_table(catalog.path).select(["run_id"]), catalog.path)
        else:
            catalog.path.write_bytes(garbage)
        fresh = Catalog(home, quiet=True)
        assert set(fresh.runs()["run_id"]) == {r.run_id for r in ids}
        assert len(fresh.notes) == 1 and "damaged" in fresh.notes[0]
    # A run whose manifest is damaged is skipped, said once; the others stay listed.
    broken = home / "runs" / ids[1].run_id / "manifest.json"
    broken.write_text(json.dumps({**json.loads(broken.read_text()), "events": "many"}))
    (home / "runs" / ids[0].run_id / "manifest.json").write_text("{")
    catalog.path.unlink()
    fresh = Catalog(home, quiet=True)
    assert fresh.runs()["run_id"].to_list() == [ids[2].run_id]
    assert fresh.runs()["run_id"].to_list() == [ids[2].run_id]  # said once per catalog
    assert len(fresh.notes) == 2 and {ids[0].run_id, ids[1].run_id} == {
        next(i.run_id for i in ids if i.run_id in note) for note in fresh.notes
    }


# -- forgetting, keeping, sizes; the magics ----------------------------------------------------------


def test_runs_forget_and_keep_on_the_command_line(tmp_path, small_log, capsys):
    home = Path(os.environ["RESTREAM_HOME"])  # this test's own (conftest), for main() here too
    env = {**ENV, "RESTREAM_HOME": str(home)}
    program = tmp_path / "antispam.py"
    program.write_text(ANTISPAM)

    def restream(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "restream_kit", *args], env=env, capture_output=True, text=True
        )

    from restream_kit.cli import main

    for name in ("a", "a", "a", "b", "b"):
        assert main(["replay", str(program), "--log", small_log, "--quiet", "--name", name]) == 0
    assert main(["replay", str(program), "--log", small_log, "--quiet", "--no-record"]) == 0
    catalog = Catalog(home)
    before = catalog.runs()
    assert sorted(before["name"]) == ["a", "a", "a", "b", "b"]
    # A recorded run is also a --out directory: `restream diff` compares runs by name.
    assert main(["diff", "a", "b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["empty"] is True
    text = restream("runs")
    assert text.returncode == 0 and "5 run(s)" in text.stdout and " kB" in text.stdout
    newest_a = before.filter(before["name"] == "a")["run_id"][0]

    kept = restream("runs", "--keep", "1")
    assert kept.returncode == 0 and "deleted 3" in kept.stdout, kept.stderr
    after = catalog.runs()
    assert sorted(after["name"]) == ["a", "b"] and newest_a in set(after["run_id"])
    assert len(os.listdir(home / "runs")) == 2  # the files went too

    assert main(["runs", "--forget", "b"]) == 0
    assert "forgot 1 run(s)" in capsys.readouterr().out
    assert catalog.runs()["name"].to_list() == ["a"]
    assert main(["runs", "--forget", "nope"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    with pytest.raises(CatalogError, match="not in the catalog"):
        catalog.load(before.filter(before["name"] == "b")["run_id"][0])


def test_the_magics_list_sizes_and_forget(tmp_path, small_log, monkeypatch):
    from IPython.core.error import UsageError
    from IPython.testing.globalipapp import get_ipython

    from widgets.magics import register

    monkeypatch.setenv("RESTREAM_DISPLAY", "text")
    ip = get_ipython()
    ip.run_line_magic("load_ext", "restream_kit")
    register(ip)  # a fresh workbench, on this test's RESTREAM_HOME
    try:
        ip.run_cell_magic("restream", f"keep --log {small_log}", ANTISPAM)
        ip.run_cell_magic("restream", f"drop --log {small_log}", ANTISPAM.replace("2 *", "3 *"))
        runs = ip.run_line_magic("restream", "runs")
        assert sorted(runs["name"]) == ["drop", "keep"]  # a serial cell is its own baseline
        assert all(s.endswith("kB") for s in runs["size"])
        ip.run_line_magic("restream", "forget drop")
        assert ip.run_line_magic("restream", "runs")["name"].to_list() == ["keep"]
        with pytest.raises(UsageError, match="no recorded run is called 'drop'"):
            ip.run_line_magic("restream", "forget drop")
    finally:
        ip.run_line_magic("reset", "-f")


def test_duckdb_queries_the_runs(tmp_path, small_log):
    catalog = Catalog(tmp_path / "home")
    program = rk.Program.from_source(ANTISPAM, name="v1")
    log = rk.Log(small_log)
    result = rk.replay(program, log)
    for name in ("v1", "v1", "v2"):
        catalog.record(name=name, program=program, log=log, engine="serial", result=result)
    out = catalog.query(
        "select name, count(*) as n, sum(size_bytes) > 0 as sized from runs group by name order by name"
    )
    assert out.rows() == [("v1", 2, True), ("v2", 1, True)]


def test_a_failed_run_is_listed_but_has_no_result(tmp_path, small_log):
    catalog = Catalog(tmp_path / "home")
    program = rk.Program.from_source(ANTISPAM, name="v1")
    log = rk.Log(small_log)
    record = catalog.record(
        name="v1", program=program, log=log, engine="serial", result=None, error="boom"
    )
    assert catalog.runs()["status"].to_list() == ["failed"] and catalog.latest("v1") is None
    with pytest.raises(CatalogError, match="failed \\(boom\\)"):
        catalog.load(record)


# -- checkpoints: merge functions by reference, and no pickle anywhere ------------------------------

PENDING_MERGES = """
from restream_kit import emit, on, state

best = state.Map(default=0)
trail = state.Map(default="")

@on("event")
def track(e):
    best.merge(e.k, lambda old: max(old, e.v), at=e.ts + 7)
    trail.merge(e.k, lambda s: s + e.tag, at=e.ts + 3)
    emit("seen", k=e.k, b=best[e.k], t=trail[e.k])
"""


def pending_log(n: int = 60):
    return rk.Log(
        [{"ts": i, "k": i % 4, "v": (i * 37) % 11, "tag": "abc"[i % 3]} for i in range(n)],
        cache=False,
    )


def test_merge_functions_waiting_in_a_checkpoint_are_rebuilt_from_the_program(tmp_path):
    log = pending_log()
    full = rk.replay(PENDING_MERGES, log, epoch=10)
    ck = tmp_path / "ck"
    rk.replay(PENDING_MERGES, log, epoch=10, checkpoint=ck)
    state_file = (ck / "epoch-000002" / "state.json").read_text()
    assert '"fn"' in state_file and "lambda" in state_file  # by reference, not by code
    later = rk.replay(PENDING_MERGES, log, epoch=10, start_from=(ck, 2))
    assert later.state == full.state
    rows = full.tables["seen"].to_pylist()
    assert later.tables["seen"].to_pylist() == [r for r in rows if r["lsn"] >= 30]
    changed = PENDING_MERGES.replace("s + e.tag", "e.tag + s")
    with pytest.raises(CheckpointError, match="merge function waiting with at="):
        rk.replay(changed, log, epoch=10, start_from=(ck, 2))


def pickles_under(*roots: Path) -> list[str]:
    """Files that are pickles (by name, or by the pickle protocol 2-5 magic at their start)."""
    found = []
    for root in roots:
        for path in Path(root).rglob("*"):
            if not path.is_file():
                continue
            with open(path, "rb") as f:
                head = f.read(2)
            if path.suffix in (".pkl", ".pickle") or (
                len(head) == 2 and head[0] == 0x80 and head[1] <= 5
            ):
                found.append(str(path))
    return found


def embedded_pickles(*roots: Path) -> int:
    """Pickles inside files: bytes values (base64 in the JSON, binary Arrow columns) that
    start with the pickle magic."""
    import base64

    import pyarrow as pa

    found = 0

    def walk(x) -> None:
        nonlocal found
        if isinstance(x, list):
            if len(x) == 2 and x[0] in ("b", "ba") and isinstance(x[1], str):
                found += base64.b64decode(x[1])[:1] == b"\x80"
            for y in x:
                walk(y)
        elif isinstance(x, dict):
            for y in x.values():
                walk(y)

    for root in roots:
        for path in Path(root).rglob("*.json"):
            walk(json.loads(path.read_text()))
        for path in [*Path(root).rglob("*.arrow"), *Path(root).rglob("*.parquet")]:
            if path.suffix == ".arrow":
                table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
            else:
                table = pq.read_table(path)
            for column in table.columns:
                if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
                    found += sum(1 for v in column.to_pylist() if v and v[:1] == b"\x80")
    return found


PARAMS = """
from restream_kit import emit, on, param, state

limit = param("limit", 2)
sent = state.Counter()


@on("message")
def count(e):
    sent[e.src] += 1
    if sent[e.src] > limit:
        emit("busy", sender=e.src)
"""


def test_no_pickle_under_the_catalog_or_a_serial_checkpoint(tmp_path):
    home = tmp_path / "home"
    ck = tmp_path / "ck"
    from restream_kit.workbench import Workbench

    bench = Workbench(Catalog(home))
    program = rk.Program.from_source(PENDING_MERGES, name="merges")
    cell = bench.run("merges", program, pending_log(), epoch=10)
    assert cell.ok
    rk.replay(program, pending_log(), epoch=10, checkpoint=ck)
    # A run that keeps its history (for re-replays), and the tables of a sweep.
    antispam = rk.Program.from_source(ANTISPAM, name="antispam")
    social = rk.Log(rk.sample_data("social_small"))
    kept = rk.replay(antispam, social, history=True)
    assert kept.history is not None
    Catalog(home).record(name="kept", program=antispam, log=social, engine="serial", result=kept)
    assert list(home.rglob("history/*"))
    swept = rk.sweep(rk.Program.from_source(PARAMS, name="swept"), social, limit=[1, 2])
    swept.write(tmp_path / "sweep")
    assert len(list((tmp_path / "sweep").rglob("*.parquet"))) >= 2
    assert len(list(home.rglob("*.parquet"))) >= 2 and len(list(ck.rglob("*.json"))) >= 6
    assert pickles_under(home, ck, tmp_path / "sweep") == []
    assert embedded_pickles(home, ck, tmp_path / "sweep") == 0
    # The old catalog's runs (state.pickle) are never loaded nor listed, said in one line.
    old = home / "runs" / "20240101-000000-abcdef"
    old.mkdir()
    (old / "state.pickle").write_bytes(b"\x80\x05N.")
    catalog = Catalog(home, quiet=True)
    # The cell (its own baseline) and "kept".
    assert old.name not in set(catalog.runs()["run_id"]) and len(catalog.runs()) == 2
    assert len(catalog.notes) == 1 and "never loaded" in catalog.notes[0]


def test_no_pickle_under_the_catalog_or_a_spark_checkpoint(tmp_path, spark_session):
    home = tmp_path / "home"
    ck = tmp_path / "ck"
    timers_ck = tmp_path / "ck-timers"
    parallel = textwrap.dedent(
        """
        from restream_kit import emit, on, state
        pages = state.Counter()
        last = state.Map(default=None)

        @on("event")
        def count(e):
            pages[e.k] += 1
            last[e.k] = (e.tag, e.v)
            emit("n", k=e.k, n=pages[e.k], t=e.tag)
        """
    )
    timers = parallel.replace("import emit,", "import emit, schedule,") + textwrap.dedent(
        """
        @on("event")
        def later(e):
            schedule("tick", at=e.ts + 5, k=e.k)

        @on("tick")
        def tick(e):
            emit("ticks", k=e.k)
        """
    )
    log = pending_log()
    options = dict(engine="spark", master="local[2]", epoch=30)
    result = rk.replay(parallel, log, **options, checkpoint=ck)
    rk.replay(timers, log, **options, checkpoint=timers_ck)
    for directory in (ck, timers_ck):
        # The pass path keeps the serial engine's format, scheduled events and all.
        assert json.loads((directory / "manifest.json").read_text())["state_format"] == "serial"
    program = rk.Program.from_source(parallel, name="spark")
    catalog = Catalog(home)
    record = catalog.record(name="spark", program=program, log=log, engine="spark", result=result)
    assert_same_result(catalog.load(record), result)
    assert pickles_under(home, ck, timers_ck) == []
    assert embedded_pickles(home, ck, timers_ck) == 0
