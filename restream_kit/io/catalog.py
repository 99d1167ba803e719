"""The run catalog: one directory per run, renamed into place when complete (see docs/catalog.md).

A run records the program (source and hash), the log (fingerprint and sources), the engine
and master, parameters, timings and metrics, its output tables (Parquet) and final state
(typed Parquet, one file per state, read only when used: :mod:`._state_files`; never a
pickle). A baseline whose program and log
have not changed is loaded from here instead of replayed again. The catalog lives under
``.restream/`` in the working directory (or ``$RESTREAM_HOME``), readable by its owner only.

Any number of processes record and read at once without a lock: a run is written into a
temporary directory and renamed to ``runs/<run_id>`` when complete, so it is listed whole or
not at all. ``index.parquet`` caches the manifests; it is refreshed from the directories on
every read and rebuilt, with one line on stderr, when it is damaged. DuckDB queries the runs
through :meth:`Catalog.query`. What one run directory holds, and its writing and reading,
is :mod:`._run_dir`; this module names, lists, renames and deletes them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..model.program import Program
from ._atomic import fsync_path, synced_file
from ._parquet import read_parquet
from ._run_dir import (
    FORMAT,
    HISTORY_DIR,
    MANIFEST,
    CatalogError,
    disk_size,
    read_manifest,
    read_result,
    write_run,
)
from .log import Log, default_home, private_dir
from .result import Result

__all__ = [
    "Catalog",
    "RunRecord",
    "CatalogError",
    "FORMAT",
    "HISTORY_DIR",
    "human_size",
    "disk_size",
    "MANIFEST",
]

#: The index of the runs: a cache of their manifests, under the catalog's home.
INDEX = "index.parquet"
#: A temporary directory left by a process on another host is removed after this long.
STALE_TMP_S = 24 * 3600

#: The columns of the index and of ``Catalog.runs()`` / the ``runs`` view, in order.
_COLUMNS: dict[str, pa.DataType] = {
    "run_id": pa.string(),
    "name": pa.string(),
    "started_at": pa.timestamp("us", tz="UTC"),
    "recorded_at": pa.timestamp("us", tz="UTC"),
    "status": pa.string(),
    "engine": pa.string(),
    "master": pa.string(),
    "events": pa.int64(),
    "wall_s": pa.float64(),
    "events_per_s": pa.float64(),
    "realtime_multiple": pa.float64(),
    "program_sha": pa.string(),
    "program_source": pa.string(),
    "log_fingerprint": pa.string(),
    "log_sources": pa.string(),
    "params": pa.string(),
    "error": pa.string(),
    "size_bytes": pa.int64(),
    "files": pa.int64(),
    "outputs": pa.string(),
}
_SCHEMA = pa.schema(list(_COLUMNS.items()))


@dataclass(frozen=True)
class RunRecord:
    """One run of the catalog (the fields a caller needs to find and load it)."""

    run_id: str
    name: str
    program_sha: str
    log_fingerprint: str
    engine: str
    master: str | None
    outputs: str | None
    status: str

    def __repr__(self) -> str:
        # The id starts with the time of the run; the hashes are for machines, not for a cell.
        where = f" on {self.master}" if self.master else ""
        return (
            f"<run {self.name!r} {self.run_id}: {self.engine}{where}, {self.status}, "
            f"outputs in {self.outputs}>"
        )


def human_size(n: int | None) -> str:
    """``n`` bytes as ``12.3 kB`` (powers of 1000, as ``du --si`` and file browsers say)."""
    if n is None:
        return ""
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"  # pragma: no cover - the loop always returns


class Catalog:
    """Runs under ``<home>/runs/<run_id>/``, listed through ``<home>/index.parquet``."""

    def __init__(self, home: str | Path | None = None, *, quiet: bool = False):
        self.home = Path(home) if home else default_home()
        self.runs_dir = self.home / "runs"
        #: The index: a cache of every run's manifest, rebuilt from them when stale or damaged.
        self.path = self.home / INDEX
        #: Lines said about this catalog (damaged index or manifest), also written to stderr
        #: unless ``quiet``.
        self.notes: list[str] = []
        self.quiet = quiet

    # -- writing -------------------------------------------------------------------------

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
        """Store a finished (or failed) run and its outputs; return its record.

        The run appears in every listing at once and whole (one rename), or, if this process
        dies first, never. A state value the codec cannot store raises :class:`StateError`
        naming the state and key, before anything is listed.
        """
        now = dt.datetime.now(dt.UTC)
        run_id = now.strftime("%Y%m%d-%H%M%S-%f-") + uuid.uuid4().hex[:12]
        private_dir(self.runs_dir)
        tmp = self.runs_dir / f".tmp-{run_id}-{socket.gethostname()}-{os.getpid()}"
        tmp.mkdir(mode=0o700)
        try:
            manifest = write_run(
                tmp, run_id, now, name, program, log, engine, result, master, params, error
            )
            fsync_path(tmp)
            final = self.runs_dir / run_id
            os.rename(tmp, final)
            fsync_path(self.runs_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        with contextlib.suppress(OSError):
            self._refresh()  # keep the index warm; a reader would refresh it anyway
        return _record(manifest, str(final) if result is not None else None)

    def forget(self, name: str) -> list[str]:
        """Delete every run called ``name`` (or the run whose id is ``name``) and its files.

        Returns the ids of the runs deleted. Each run leaves every listing at once (renamed
        out of ``runs/``) before its files are removed.
        """
        rows = self._rows()
        ids = [r["run_id"] for r in rows if r["name"] == name or r["run_id"] == name]
        return self._delete_runs(ids)

    def keep(self, n: int, name: str | None = None) -> list[str]:
        """Keep the newest ``n`` runs of each name (of ``name`` only, if given); delete the rest.

        Returns the ids of the runs deleted.
        """
        if n < 0:
            raise CatalogError(f"--keep {n}: the number of runs to keep cannot be negative")
        seen: dict[str, int] = {}
        doomed = []
        for row in self._rows():  # newest first
            if name is not None and row["name"] != name:
                continue
            seen[row["name"]] = seen.get(row["name"], 0) + 1
            if seen[row["name"]] > n:
                doomed.append(row["run_id"])
        return self._delete_runs(doomed)

    def sweep(self) -> list[str]:
        """Remove what killed writers left: temporary run directories whose process is gone
        (or, from another host, that are older than a day) and unfinished deletions."""
        removed = []
        if not self.runs_dir.is_dir():
            return removed
        for tmp in self.home.glob(f".{INDEX}.*.tmp"):  # an index write cut short
            pid_text = tmp.name.split(".")[3] if tmp.name.count(".") >= 5 else ""
            if not (pid_text.isdigit() and _alive(int(pid_text))):
                with contextlib.suppress(OSError):
                    tmp.unlink()
                    removed.append(tmp.name)
        host = socket.gethostname()
        for entry in os.scandir(self.runs_dir):
            if not entry.name.startswith((".tmp-", ".trash-")):
                continue
            pid_text = entry.name.rsplit("-", 1)[-1]
            same_host = entry.name.startswith(".trash-") or f"-{host}-" in entry.name
            try:
                age = time.time() - entry.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            alive = pid_text.isdigit() and same_host and _alive(int(pid_text))
            if (same_host and not alive) or age > STALE_TMP_S:
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.name)
        return removed

    def _delete_runs(self, ids: list[str]) -> list[str]:
        """Delete the runs ``ids`` and what killed writers left; return ``ids``."""
        for run_id in ids:
            self._delete(run_id)
        self.sweep()
        if ids:
            with contextlib.suppress(OSError):
                self._refresh()
        return ids

    def _delete(self, run_id: str) -> None:
        src = self.runs_dir / run_id
        trash = self.runs_dir / f".trash-{run_id}-{os.getpid()}"
        try:
            os.rename(src, trash)
        except FileNotFoundError:
            return  # forgotten by another process meanwhile
        shutil.rmtree(trash, ignore_errors=True)

    # -- reading -------------------------------------------------------------------------

    def find(
        self, *, program_sha: str, log_fingerprint: str, engine: str | None = "serial"
    ) -> RunRecord | None:
        """The latest successful run of this program on this log (on ``engine``, if given)."""
        for row in self._rows():
            if (
                row["status"] == "ok"
                and row["program_sha"] == program_sha
                and row["log_fingerprint"] == log_fingerprint
                and (not engine or row["engine"] == engine)
            ):
                return _record(row, row["outputs"])
        return None

    def latest(self, name: str, *, log_fingerprint: str | None = None) -> RunRecord | None:
        """The latest successful run recorded under ``name`` (on this log, if given)."""
        for row in self._rows():
            if (
                row["status"] == "ok"
                and row["name"] == name
                and (not log_fingerprint or row["log_fingerprint"] == log_fingerprint)
            ):
                return _record(row, row["outputs"])
        return None

    def manifest(self, run_id: str) -> dict[str, Any]:
        """The manifest of run ``run_id`` (a dict, as in ``runs/<run_id>/manifest.json``)."""
        return read_manifest(self.runs_dir / run_id, run_id, self.home)

    def load(self, record: RunRecord | str) -> Result:
        """The stored result of a run: tables, final state, metrics (no code is run)."""
        run_id = record if isinstance(record, str) else record.run_id
        manifest = self.manifest(run_id)
        if manifest.get("status") != "ok" or "tables" not in manifest:
            raise CatalogError(f"run {run_id} failed ({manifest.get('error')}); it has no result")
        return read_result(self.runs_dir / run_id, run_id, manifest)

    def program_source(self, run_id: str) -> str:
        """The source of the program that made run ``run_id``."""
        return self.manifest(run_id)["program_source"]

    def runs(self):
        """Every complete run, newest first, as a polars DataFrame (with its size on disk)."""
        import polars as pl

        frame = pl.from_arrow(self._table().drop(["program_source"]))
        frame = frame.with_columns(
            pl.col("program_sha").str.slice(0, 12).alias("program"),
            pl.col("log_fingerprint").alias("log"),
            pl.col("size_bytes").map_elements(human_size, return_dtype=pl.String).alias("size"),
            # The part of size that is the run's state history (replay(..., history=True)).
            pl.col("outputs")
            .map_elements(_history_size, return_dtype=pl.String, skip_nulls=False)
            .alias("history"),
        )
        # What a glance needs first: polars shows the first and last columns of wide frames.
        first = [
            "run_id",
            "name",
            "size",
            "history",
            "status",
            "engine",
            "started_at",
            "events",
            "wall_s",
        ]
        last = ["program", "log"]
        middle = [c for c in frame.columns if c not in first and c not in last]
        return frame.select(first + middle + last)

    def query(self, sql: str):
        """Run DuckDB ``sql`` over a view ``runs`` of every run (one row per manifest).

        An in-memory DuckDB reads the index: nothing is locked, so queries never wait for
        (or block) a process that records. Returns a polars DataFrame.
        """
        import duckdb
        import polars as pl

        runs = self._table()
        con = duckdb.connect(":memory:")
        try:
            con.register("runs", runs)
            return pl.from_arrow(con.sql(sql).to_arrow_table())
        finally:
            con.close()

    def size(self) -> int:
        """Bytes on disk of every complete run."""
        return int(sum(r["size_bytes"] or 0 for r in self._rows()))

    # -- the index -----------------------------------------------------------------------

    def _rows(self) -> list[dict[str, Any]]:
        return self._table().drop(["program_source"]).to_pylist()

    def _table(self) -> pa.Table:
        """Every complete run, newest first: the index, refreshed from the run directories."""
        return self._refresh()

    def _refresh(self) -> pa.Table:
        names = _run_dirs(self.runs_dir)
        index = self._read_index()
        have = {} if index is None else dict.fromkeys(index.column("run_id").to_pylist())
        missing = [n for n in names if n not in have]
        gone = [n for n in have if n not in names]
        rows = []
        for run_id in missing:
            row = self._index_row(run_id)
            if row is not None:
                rows.append(row)
        table = index if index is not None else _SCHEMA.empty_table()
        if gone:
            import pyarrow.compute as pc

            table = table.filter(pc.invert(pc.is_in(table.column("run_id"), pa.array(gone))))
        if rows:
            table = pa.concat_tables([table, pa.Table.from_pylist(rows, schema=_SCHEMA)])
        if index is None or missing or gone:
            table = table.sort_by([("recorded_at", "descending"), ("run_id", "descending")])
            if names or self.path.exists():
                # A catalog shared read-only is still listed, from its manifests.
                with contextlib.suppress(OSError):
                    self._write_index(table)
        return table

    def _read_index(self) -> pa.Table | None:
        if not self.path.exists():
            return None
        try:
            table = read_parquet(self.path)
            if table.schema != _SCHEMA:
                raise ValueError("its columns are not the catalog's")
            return table
        except FileNotFoundError:
            return None  # replaced between exists() and the read: rebuild this once
        except (OSError, ValueError, pa.ArrowException) as exc:
            reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
            self._say(
                f"restream: the catalog index {self.path} is damaged ({reason}); "
                f"rebuilding it from {self.runs_dir}"
            )
            return None

    def _write_index(self, table: pa.Table) -> None:
        private_dir(self.home)
        tmp = self.home / f".{INDEX}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with synced_file(tmp, exclusive=True) as f:
                pq.write_table(table, f)
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    def _index_row(self, run_id: str) -> dict[str, Any] | None:
        run_dir = self.runs_dir / run_id
        if not (run_dir / MANIFEST).exists() and (run_dir / "state.pickle").exists():
            # A run of the old DuckDB catalog: its state is a pickle, which is never loaded.
            self._say(
                f"restream: {self.runs_dir} holds runs of an older restream (with pickled "
                "state, which is never loaded: it could run code); they are not listed. Delete "
                f"them and {self.home / 'catalog.duckdb'} to silence this line"
            )
            return None
        try:
            m = self.manifest(run_id)
        except CatalogError as exc:
            if run_dir.exists():
                self._say(f"restream: skipping a damaged run in the catalog: {exc}")
            return None
        try:
            row = {c: m.get(c) for c in _COLUMNS}
            for c in ("started_at", "recorded_at"):
                row[c] = dt.datetime.fromisoformat(row[c]) if row[c] else None
            row["files"] = len(m.get("files", {}))
            row["outputs"] = str(self.runs_dir / run_id) if m.get("status") == "ok" else None
            if row["run_id"] != run_id:
                raise ValueError(f"it names run {row['run_id']!r}")
            pa.Table.from_pylist([row], schema=_SCHEMA)  # every field of the type it must be
        except (ValueError, TypeError, pa.ArrowException) as exc:
            self._say(f"restream: skipping a damaged run in the catalog: run {run_id}: {exc}")
            return None
        return row

    def _say(self, line: str) -> None:
        if line in self.notes:
            return  # once per Catalog: a damaged run would otherwise be said at every listing
        self.notes.append(line)
        if not self.quiet:
            print(line, file=sys.stderr)


# -- helpers ---------------------------------------------------------------------------------


def _record(row: dict[str, Any], outputs: str | None) -> RunRecord:
    return RunRecord(
        row["run_id"],
        row["name"],
        row["program_sha"],
        row["log_fingerprint"],
        row["engine"],
        row["master"],
        outputs,
        row["status"],
    )


def _history_size(outputs: str | None) -> str:
    size = disk_size(outputs) if outputs else 0
    return human_size(size) if size else ""


def _run_dirs(runs_dir: Path) -> list[str]:
    """The complete runs: every directory of ``runs/`` that is not a temporary one."""
    try:
        return [e.name for e in os.scandir(runs_dir) if not e.name.startswith(".") and e.is_dir()]
    except FileNotFoundError:
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
