"""Passes holding copies that run by ranges of the log (``passes._copies``), and the
partition values that put value ``i`` in partition ``i`` of a pass (:func:`spread_values`)."""

from __future__ import annotations

from typing import Any

from ....io.log import Log
from . import _rows as W
from ._plan import ORDER, PassPlan

__all__ = ["copy_ranges", "spread_values"]


def copy_ranges(
    session: Any, pp: PassPlan, events: Any, first: int, n: int, log: Log | None = None
) -> dict[int, tuple[str, tuple[bytes, ...]]]:
    """The passes holding copies that run by ranges of the log (``passes._copies``), each with the
    SQL of its events' partition values and the positions where its ranges 1, 2, ... start.

    A pass by log order that runs log events only (no stage schedules events, and a start
    state has none waiting: the caller says) holding copies: its ``n`` partitions take
    contiguous, equal ranges of the events from row ``first`` (the first after a start), so
    that each needs the copied state only as of its range's start and the versions within
    it. The range ends are read from the events' table, or else from the log's ordered copy
    (``log``); a log with neither (read by Spark from a URI on a cluster) keeps the events
    spread by hash, each partition with every version."""
    table = getattr(events, "table", None)
    held = table is not None and table.num_rows > 0
    if n < 2 or pp.schedules or not (held or (log is not None and log.copied)):
        return {}
    passes = [p for p in pp.passes if p.copies and p.partition == ORDER]
    if not passes:
        return {}
    total = table.num_rows if held else len(log)
    if total - first < n:
        return {}
    rows = [first + (r * (total - first) + n - 1) // n for r in range(1, n)]
    at = table.select(["lsn", "ts"]).take(rows) if held else log.rows_at(rows, ["lsn", "ts"])
    lsn, ts = at.column("lsn").to_pylist(), at.column("ts").to_pylist()
    bounds = tuple(W.position_bytes((int(t), 2, int(o), b"")) for t, o in zip(ts, lsn))
    values = spread_values(session, n)
    cases = " ".join(f"WHEN _rs_o < {int(o)} THEN '{v}'" for o, v in zip(lsn, values))
    sql = f"CASE {cases} ELSE '{values[-1]}' END"
    return {p.index: (sql, bounds) for p in passes}


_SPREAD: dict[tuple, tuple[str, ...]] = {}


def spread_values(session: Any, n: int) -> tuple[str, ...]:
    """One partition value per partition of a pass repartitioned by ``_rs_pk`` into ``n``:
    value ``i`` lands in partition ``i`` (Spark puts a value in ``pmod(hash(value), n)``;
    Spark computes that here, so the values are right for whatever Spark runs the pass)."""
    key = (id(session), n)
    if key not in _SPREAD:
        found: dict[int, str] = {}
        tried = 0
        while len(found) < n:
            more = 32 * n
            rows = (
                session.range(tried, tried + more)
                .selectExpr("concat('c', CAST(id AS STRING), ';') AS v")
                .selectExpr("v", f"pmod(hash(v), {n}) AS p")
                .groupBy("p")
                .agg({"v": "min"})
                .collect()
            )
            for p, v in rows:
                found.setdefault(p, v)
            tried += more
        _SPREAD[key] = tuple(found[i] for i in range(n))
    return _SPREAD[key]
