"""Which engines the parametrized suite runs on, and what "identical results" means."""

from __future__ import annotations

import restream_kit as rk

__all__ = ["ENGINE_PARAMS", "CLUSTER_ENGINES", "assert_same_result", "rows_of"]

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


def rows_of(result: rk.Result, table: str) -> list[dict]:
    """A table's rows as dicts (empty when the table was never emitted)."""
    return result.tables[table].to_pylist() if table in result.tables else []
