"""The run catalog: every replay recorded in a DuckDB file, its outputs as Parquet beside it.

A run records the program (source and hash), the log (fingerprint and sources), the engine
and master, parameters, timings and metrics, and where its outputs are. A baseline whose
program and log have not changed is loaded from here instead of replayed again. The catalog
lives under ``.restream/`` in the working directory (or ``$RESTREAM_HOME``), readable by its
owner only.
"""

from __future__ import annotations

import datetime as dt
import json
import pickle
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq

from .log import Log, default_home, private_dir
from .program import Program
from .result import Metrics, Result

__all__ = ["Catalog", "RunRecord"]

_SCHEMA = """
create table if not exists runs (
    run_id varchar primary key,
    name varchar,
    started_at timestamp,
    program_sha varchar,
    program_source varchar,
    log_fingerprint varchar,
    log_sources varchar,
    engine varchar,
    master varchar,
    params varchar,
    wall_s double,
    events bigint,
    events_per_s double,
    realtime_multiple double,
    metrics varchar,
    outputs varchar,
    status varchar,
    error varchar
)
"""


@dataclass(frozen=True)
class RunRecord:
    """One row of the catalog."""

    run_id: str
    name: str
    program_sha: str
    log_fingerprint: str
    engine: str
    master: str | None
    outputs: str | None
    status: str


class Catalog:
    """Runs recorded in ``<home>/catalog.duckdb`` with outputs under ``<home>/runs/<run_id>/``."""

    def __init__(self, home: str | Path | None = None):
        self.home = Path(home) if home else default_home()
        self.path = self.home / "catalog.duckdb"
        self.runs_dir = self.home / "runs"

    def _connect(self) -> duckdb.DuckDBPyConnection:
        private_dir(self.home)
        con = duckdb.connect(str(self.path))
        con.execute(_SCHEMA)
        self.path.chmod(0o600)
        return con

    def record(
        self,
        *,
        name: str,
        program: Program,
        log: Log,
        engine: str,
        result: Result | None,
        master: str | None = None,
        params: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> RunRecord:
        """Store a finished (or failed) run and its outputs; return its record."""
        run_id = dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        outputs = None
        metrics: dict[str, Any] = {}
        if result is not None:
            out_dir = private_dir(self.runs_dir) / run_id
            result.write(out_dir)
            with open(out_dir / "state.pickle", "wb") as f:
                pickle.dump(result.state, f, protocol=pickle.HIGHEST_PROTOCOL)
            (out_dir / "metrics.json").write_text(json.dumps(result.metrics.as_dict(), default=str))
            (out_dir / "warnings.json").write_text(json.dumps(result.warnings))
            outputs = str(out_dir)
            metrics = result.metrics.as_dict()
        status = "ok" if error is None else "failed"
        sources = [s.label for s in log.sources]
        with self._connect() as con:
            con.execute(
                "insert into runs values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    run_id,
                    name,
                    dt.datetime.now(),
                    program.sha256,
                    program.source,
                    log.fingerprint,
                    json.dumps(sources),
                    engine,
                    master,
                    json.dumps(params or {}, default=str),
                    metrics.get("wall_s"),
                    metrics.get("events"),
                    metrics.get("events_per_s"),
                    metrics.get("realtime_multiple"),
                    json.dumps(metrics, default=str),
                    outputs,
                    status,
                    error,
                ],
            )
        return RunRecord(
            run_id, name, program.sha256, log.fingerprint, engine, master, outputs, status
        )

    def find(
        self, *, program_sha: str, log_fingerprint: str, engine: str | None = "serial"
    ) -> RunRecord | None:
        """The latest successful run of this program on this log (on ``engine``, if given)."""
        query = (
            "select run_id, name, program_sha, log_fingerprint, engine, master, outputs, status "
            "from runs where status = 'ok' and program_sha = ? and log_fingerprint = ?"
        )
        args: list[Any] = [program_sha, log_fingerprint]
        if engine:
            query += " and engine = ?"
            args.append(engine)
        return self._one(query + " order by started_at desc limit 1", args)

    def latest(self, name: str, *, log_fingerprint: str | None = None) -> RunRecord | None:
        """The latest successful run recorded under ``name`` (on this log, if given)."""
        query = (
            "select run_id, name, program_sha, log_fingerprint, engine, master, outputs, status "
            "from runs where status = 'ok' and name = ?"
        )
        args: list[Any] = [name]
        if log_fingerprint:
            query += " and log_fingerprint = ?"
            args.append(log_fingerprint)
        return self._one(query + " order by started_at desc limit 1", args)

    def program_source(self, run_id: str) -> str:
        with self._connect() as con:
            return con.execute(
                "select program_source from runs where run_id = ?", [run_id]
            ).fetchone()[0]

    def _one(self, query: str, args: list[Any]) -> RunRecord | None:
        if not self.path.exists():
            return None
        with self._connect() as con:
            row = con.execute(query, args).fetchone()
        if row is None or (row[6] and not Path(row[6]).exists()):
            return None
        return RunRecord(*row)

    def load(self, record: RunRecord | str) -> Result:
        """The stored result of a run: tables, final state, metrics."""
        run_id = record if isinstance(record, str) else record.run_id
        out_dir = self.runs_dir / run_id
        tables = {p.stem: pq.read_table(p) for p in sorted(out_dir.glob("*.parquet"))}
        with open(out_dir / "state.pickle", "rb") as f:
            state = pickle.load(f)
        m = json.loads((out_dir / "metrics.json").read_text())
        fields = {k: m[k] for k in Metrics.__dataclass_fields__ if k in m}
        warnings = json.loads((out_dir / "warnings.json").read_text())
        return Result(tables=tables, state=state, metrics=Metrics(**fields), warnings=warnings)

    def runs(self):
        """Every run, newest first, as a polars DataFrame."""
        import polars as pl

        if not self.path.exists():
            return pl.DataFrame()
        with self._connect() as con:
            return pl.from_arrow(
                con.sql(
                    "select run_id, name, started_at, engine, master, status, events, wall_s, "
                    "events_per_s, realtime_multiple, program_sha[:12] as program, log_fingerprint as log, "
                    "outputs, error from runs order by started_at desc"
                ).to_arrow_table()
            )
