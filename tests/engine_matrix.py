"""Which engines the parametrized suite runs on, and what "identical results" means."""

from __future__ import annotations

import restream_kit as rk

__all__ = [
    "ENGINE_PARAMS",
    "CLUSTER_ENGINES",
    "assert_same_result",
    "assert_ran_as_planned",
    "rows_of",
]

#: Every engine the suite covers. Add an engine here and every semantic test runs on it.
#: ``spark-cluster`` is the Spark engine on a real standalone cluster (a master and a worker
#: started for the test session), ``spark-connect`` the same over a real Spark Connect server.
ENGINE_PARAMS = ["serial", "spark", "spark-cluster", "spark-connect"]

#: Engines that need a cluster: they run tests/test_semantics.py and tests marked ``cluster``.
CLUSTER_ENGINES = ("spark-cluster", "spark-connect")


def assert_same_result(got: rk.Result, want: rk.Result) -> None:
    """Identical output tables (same columns, types, rows, order) and identical final state."""
    assert sorted(got.tables) == sorted(want.tables), "different output tables"
    for name in want.tables:
        g, w = got.tables[name], want.tables[name]
        assert g.schema == w.schema, f"table {name}: schema {g.schema} != {w.schema}"
        assert g.to_pylist() == w.to_pylist(), f"table {name}: rows differ"
    assert got.state == want.state, "final state differs"


def assert_ran_as_planned(program: rk.Program, result: rk.Result) -> None:
    """A Spark replay ran each stage the way the plan says: in parallel unless the plan calls
    it sequential, and never as one task in disguise. ``metrics.path`` says what ran."""
    path = result.metrics.path
    assert path, "the replay did not say what ran (metrics.path is empty)"
    plan = rk.plan(program, allow_nondeterminism=True)
    sequential = {s.name for s in plan.stages if s.mode == "sequential"}
    for stage, what in path.items():
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
