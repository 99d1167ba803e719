"""Which engines the parametrized suite runs on, and what "identical results" means."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import restream_kit as rk
from restream_kit.engines import engine_names

__all__ = [
    "ENGINE_PARAMS",
    "CLUSTER_ENGINES",
    "engine_of_param",
    "notyet_xfail",
    "assert_same_result",
    "assert_ran_as_planned",
    "rows_of",
    "waiting",
    "assert_same_commits",
    "keep_first_epochs",
    "social_sample",
    "checkpointed_alike",
]

SMALL_SOCIAL = Path(__file__).resolve().parents[1] / "sample_data" / "social_small.parquet"

#: Engines that need a cluster: they run tests/test_semantics.py and tests marked ``cluster``.
#: ``spark-cluster`` is the Spark engine on a real standalone cluster (a master and a worker
#: started for the test session), ``spark-connect`` the same over a real Spark Connect server.
CLUSTER_ENGINES = ("spark-cluster", "spark-connect") if "spark" in engine_names() else ()

#: Every engine the suite covers: every registered engine (the ``restream_kit.engines`` entry
#: points, see ``restream_kit/engines/__init__.py``), then the Spark engine's cluster
#: placements. Register an engine and every semantic test runs on it.
ENGINE_PARAMS = [*engine_names(), *CLUSTER_ENGINES]


def engine_of_param(param: str) -> str:
    """The registered engine a matrix entry runs (``spark-cluster`` runs ``spark``)."""
    return "spark" if param in CLUSTER_ENGINES else param


def notyet_xfail(marker: pytest.Mark | None, param: str) -> pytest.MarkDecorator | None:
    """The ``xfail`` a ``notyet`` marker puts on the matrix entry ``param``, or None.

    ``@pytest.mark.notyet(["spark"], raises=SomeError, reason="...")`` says: on these engines
    the test fails with exactly ``SomeError`` for now (as ibis' ``notyet`` names the
    exception). The xfail is strict, so a test that starts passing fails until its marker
    goes, and a test that fails with any other exception is a real failure. Naming ``spark``
    covers its cluster placements too.
    """
    if marker is None:
        return None
    engines = marker.args[0] if marker.args else marker.kwargs.get("engines")
    raises = marker.kwargs.get("raises")
    reason = marker.kwargs.get("reason") or (marker.args[1] if len(marker.args) > 1 else None)
    if isinstance(engines, str) or not engines:
        raise TypeError("notyet: give the engines as a list, e.g. notyet(['spark'], ...)")
    unknown = set(engines) - set(ENGINE_PARAMS)
    if unknown:
        raise TypeError(f"notyet: unknown engine(s) {sorted(unknown)}; known: {ENGINE_PARAMS}")
    if not (isinstance(raises, type) and issubclass(raises, BaseException)):
        raise TypeError("notyet: name the exception the gap raises, e.g. raises=EngineUnsupported")
    if not reason:
        raise TypeError("notyet: say why in reason=...")
    if param not in engines and engine_of_param(param) not in engines:
        return None
    return pytest.mark.xfail(raises=raises, strict=True, reason=f"not yet on {param}: {reason}")


def assert_same_result(got: rk.Result, want: rk.Result) -> None:
    """Identical output tables (same columns, types, rows, order) and identical final state."""
    assert sorted(got.tables) == sorted(want.tables), "different output tables"
    for name in want.tables:
        g, w = got.tables[name], want.tables[name]
        assert g.schema == w.schema, f"table {name}: schema {g.schema} != {w.schema}"
        assert g.to_pylist() == w.to_pylist(), f"table {name}: rows differ"
    assert got.state == want.state, "final state differs"


#: ``metrics.path`` entries that tell how the replay as a whole ran, not how a stage did: a
#: checkpoint committed in waves (``_waves``) and how a history was recorded.
REPLAY_NOTES = ("checkpoint", "history")


def assert_ran_as_planned(program: rk.Program, result: rk.Result) -> None:
    """A Spark replay ran each stage the way the plan says: in parallel unless the plan calls
    it sequential, and never as one task in disguise. ``metrics.path`` says what ran."""
    path = result.metrics.path
    assert path, "the replay did not say what ran (metrics.path is empty)"
    plan = rk.plan(program, allow_nondeterminism=True)
    sequential = {s.name for s in plan.stages if s.mode == "sequential"}
    for stage, what in path.items():
        if stage in REPLAY_NOTES:
            continue
        if stage == "whole program":
            # What the passes cannot split yet (tests/test_passes.py lists it): said aloud.
            assert any("ran in one task" in w for w in result.warnings), result.warnings
        elif what.startswith("sequential"):
            assert stage in sequential, f"{stage} ran in one task ({what}), planned parallel"
        else:
            assert what.startswith(("parallel", "lowered")), what


def rows_of(result: rk.Result, table: str) -> list[dict]:
    """A table's rows as dicts (empty when the table was never emitted)."""
    return result.tables[table].to_pylist() if table in result.tables else []


def waiting(state: dict) -> tuple[list, list]:
    """A committed state's timed writes and scheduled events in the order they apply,
    without the numbers each engine gives them its own way (the serial engine keeps them as
    heaps)."""
    writes = sorted(state["future"], key=lambda w: w[:2])
    events = sorted(state["scheduled"], key=lambda s: s[:2])
    return [w[:1] + w[2:] for w in writes], [(s[0], vars(s[2])) for s in events]


def keep_first_epochs(directory, n: int) -> None:
    """The checkpoint in ``directory`` as a replay killed after its epoch ``n - 1`` committed
    leaves it (its manifest lists the first ``n`` epochs, and says it is not complete)."""
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["epochs"], manifest["complete"] = manifest["epochs"][:n], False
    (directory / "manifest.json").write_text(json.dumps(manifest))


def assert_same_commits(want_dir, got_dir, epochs: range) -> None:
    """Each committed epoch of ``epochs`` in checkpoint ``got_dir`` is the one in ``want_dir``
    (the serial engine's): events done, state, quarantined runs, rows, and the timed writes
    and scheduled events waiting (but at the last epoch, which holds what waits after the
    log: each engine keeps its own)."""
    from restream_kit.io import checkpoint

    last = json.loads((want_dir / "manifest.json").read_text())["epochs"][-1]["epoch"]
    for k in epochs:
        a, b = checkpoint.read(want_dir, k), checkpoint.read(got_dir, k)
        assert (a.done, a.state["stores"]) == (b.done, b.state["stores"]), f"epoch {k}"
        assert a.state["quarantined"] == b.state["quarantined"], f"epoch {k}: quarantined"
        if k < last:
            assert waiting(a.state) == waiting(b.state), f"epoch {k}: waiting"
        rows = [checkpoint.load_value(d / f"epoch-{k:06d}", "rows") for d in (want_dir, got_dir)]
        assert rows[0] == rows[1], f"epoch {k}: rows"


def social_sample(n: int = 6000) -> rk.Log:
    """The first ``n`` events of the small social sample, as a log of their own."""
    table = rk.Log(SMALL_SOCIAL).table.slice(0, n)
    return rk.Log(table.drop_columns(["lsn"]))


def checkpointed_alike(program: rk.Program, log: rk.Log, tmp_path, epoch: int = 1500):
    """``program`` replayed serially and on Spark's passes (3 partitions), each checkpointing
    every ``epoch`` events (in ``tmp_path / "serial"`` and ``tmp_path / "spark"``), checked
    equal: the serial result, the Spark result and the Spark replay's options (to resume it)."""
    want = rk.replay(program, log, checkpoint=tmp_path / "serial", epoch=epoch)
    spark = dict(engine="spark", path="passes", partitions=3, checkpoint=tmp_path / "spark")
    spark["epoch"] = epoch
    got = rk.replay(program, log, **spark)
    assert_same_result(got, want)
    return want, got, spark
