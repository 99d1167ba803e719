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
through :meth:`Catalog.query`.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import os
import re
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

from ..model import values
from ..model.errors import RestreamError
from ..model.program import Program
from ._atomic import fsync_path, synced_file, write_synced
from ._parquet import read_parquet
from ._state_files import LazyState, write_state
from ._table_files import write_table
from .log import Log, default_home, private_dir
from .result import QUARANTINE_FILE, Metrics, Result, quarantine_table

__all__ = [
    "Catalog",
    "RunRecord",
    "CatalogError",
    "FORMAT",
    "HISTORY_DIR",
    "human_size",
    "disk_size",
]

#: The run directory format this module writes (``manifest.json``'s ``format``): 2 keeps
#: the state as Parquet (``state/``), 1 as one JSON document (``state.json``), still read.
FORMAT = 2
_READS = (1, 2)
MANIFEST = "manifest.json"
STATE_FILE = "state.json"  # format 1
QUARANTINE = QUARANTINE_FILE  # "_quarantine.parquet", apart from the tables
INDEX = "index.parquet"
#: The folder of a run directory that holds its history (``restream_kit.history``).
HISTORY_DIR = "history"
#: Table names written as ``<name>.parquet``; others go to ``tables/NNNN.parquet``.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}$")
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


class CatalogError(RestreamError):
    """A run that cannot be found or read back (forgotten, damaged, from an old catalog)."""


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
            manifest = self._write_run(
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

    def _write_run(
        self, tmp, run_id, now, name, program, log, engine, result, master, params, error
    ) -> dict[str, Any]:
        files: dict[str, int] = {}
        tables: dict[str, str] = {}
        metrics: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        if result is not None:
            # <table>.parquet, as `replay --out` writes: a run directory is also an --out one.
            for i, table_name in enumerate(result.tables):
                rel = f"{table_name}.parquet"
                if not _SAFE_NAME.match(table_name):  # not a plain file name: numbered aside
                    (tmp / "tables").mkdir(mode=0o700, exist_ok=True)
                    rel = f"tables/{i:04d}.parquet"
                write_table(result.tables, table_name, tmp / rel)  # (a file's: copied)
                tables[table_name] = rel
            if result.quarantine.num_rows:
                pq.write_table(result.quarantine, tmp / QUARANTINE)
            if (
                result.history is not None
            ):  # history/: every state write (restream_kit.history.recorder)
                result.history.write(tmp)
            state = write_state(tmp, result.state)
            metrics = result.metrics.as_dict()
            extra = {
                "state": state,
                "metrics": _metrics(result.metrics),
                "warnings": list(result.warnings),
                "on_error": result.on_error,
                "resumed_from_epoch": result.resumed_from_epoch,
                "tables": tables,
                "schemas": _schemas_out(result.schemas),
            }
        for path in sorted(tmp.rglob("*")):
            if path.is_file():
                fsync_path(path)
                files[str(path.relative_to(tmp))] = path.stat().st_size
        wall = metrics.get("wall_s")
        started = now - dt.timedelta(seconds=wall) if isinstance(wall, (int, float)) else now
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "run_id": run_id,
            "name": name,
            "started_at": started.isoformat(),
            "recorded_at": now.isoformat(),
            "status": "ok" if error is None and result is not None else "failed",
            "engine": engine,
            "master": master,
            "events": metrics.get("events"),
            "wall_s": _finite(metrics.get("wall_s")),
            "events_per_s": _finite(metrics.get("events_per_s")),
            "realtime_multiple": _finite(metrics.get("realtime_multiple")),
            "program_sha": program.sha256,
            "program_source": program.source,
            "log_fingerprint": log.fingerprint,
            "log_sources": json.dumps([s.label for s in log.sources]),
            "params": json.dumps(params or {}, default=str, sort_keys=True),
            "error": error if error is not None or result is not None else "no result",
            **extra,
        }
        # The manifest lists its own size too: settle the few bytes the sizes themselves take.
        manifest["files"] = files
        files[MANIFEST] = 0
        for _ in range(4):
            manifest["size_bytes"] = sum(files.values())
            text = json.dumps(manifest, indent=1, allow_nan=False).encode()
            if files[MANIFEST] == len(text):
                break
            files[MANIFEST] = len(text)
        write_synced(tmp / MANIFEST, text, exclusive=True)
        return manifest

    def forget(self, name: str) -> list[str]:
        """Delete every run called ``name`` (or the run whose id is ``name``) and its files.

        Returns the ids of the runs deleted. Each run leaves every listing at once (renamed
        out of ``runs/``) before its files are removed.
        """
        rows = self._rows()
        ids = [r["run_id"] for r in rows if r["name"] == name or r["run_id"] == name]
        for run_id in ids:
            self._delete(run_id)
        self.sweep()
        if ids:
            with contextlib.suppress(OSError):
                self._refresh()
        return ids

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
        for run_id in doomed:
            self._delete(run_id)
        self.sweep()
        if doomed:
            with contextlib.suppress(OSError):
                self._refresh()
        return doomed

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

    def program_source(self, run_id: str) -> str:
        """The source of the program that made run ``run_id``."""
        return self.manifest(run_id)["program_source"]

    def manifest(self, run_id: str) -> dict[str, Any]:
        """The manifest of run ``run_id`` (a dict, as in ``runs/<run_id>/manifest.json``)."""
        path = self.runs_dir / run_id / MANIFEST
        try:
            manifest = json.loads(path.read_text())
        except FileNotFoundError:
            raise CatalogError(
                f"run {run_id} is not in the catalog {self.home} (forgotten?)"
            ) from None
        except (OSError, ValueError) as exc:
            raise CatalogError(f"run {run_id}: {path} cannot be read: {exc}") from None
        if not isinstance(manifest, dict) or manifest.get("format") not in _READS:
            fmt = manifest.get("format") if isinstance(manifest, dict) else None
            newer = (
                f" (format {fmt}, from a newer restream)"
                if isinstance(fmt, int) and fmt > FORMAT
                else ""
            )
            raise CatalogError(f"run {run_id}: {path} is not a restream run manifest{newer}")
        return manifest

    def load(self, record: RunRecord | str) -> Result:
        """The stored result of a run: tables, final state, metrics (no code is run)."""
        run_id = record if isinstance(record, str) else record.run_id
        manifest = self.manifest(run_id)
        if manifest.get("status") != "ok" or "tables" not in manifest:
            raise CatalogError(f"run {run_id} failed ({manifest.get('error')}); it has no result")
        out_dir = self.runs_dir / run_id
        try:
            tables = {
                name: read_parquet(_inside(out_dir, rel))
                for name, rel in manifest["tables"].items()
            }
            state = _state_in(out_dir, manifest)
            fields = values.decode(manifest["metrics"])
            schemas = _schemas_in(manifest.get("schemas", {}))
            quarantine = (
                read_parquet(out_dir / QUARANTINE)
                if (out_dir / QUARANTINE).exists()
                else quarantine_table()
            )
        except FileNotFoundError as exc:
            raise CatalogError(
                f"run {run_id} lost a file ({exc.filename}); forgotten meanwhile?"
            ) from None
        except (OSError, pa.ArrowException, values.ValueCodecError) as exc:
            raise CatalogError(f"run {run_id} cannot be read: {exc}") from None
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise CatalogError(f"run {run_id}: a damaged manifest ({exc!r})") from None
        known = {k: v for k, v in fields.items() if k in Metrics.__dataclass_fields__}
        return Result(
            schemas=schemas,
            path=str(out_dir),
            tables=tables,
            state=state,
            metrics=Metrics(**known),
            warnings=list(manifest.get("warnings", [])),
            quarantine=quarantine,
            on_error=manifest.get("on_error", "stop"),
            resumed_from_epoch=manifest.get("resumed_from_epoch"),
        )

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


def disk_size(run_dir: str | Path) -> int:
    """Bytes the history of the run in ``run_dir`` takes on disk (0 without one)."""
    where = Path(run_dir) / HISTORY_DIR
    return sum(p.stat().st_size for p in where.rglob("*") if p.is_file()) if where.exists() else 0


def _history_size(outputs: str | None) -> str:
    size = disk_size(outputs) if outputs else 0
    return human_size(size) if size else ""


def _inside(run_dir: Path, rel: str) -> Path:
    """``run_dir / rel``, refusing a manifest that points outside its run."""
    if not isinstance(rel, str) or rel.startswith("/") or ".." in Path(rel).parts:
        raise CatalogError(f"{run_dir / MANIFEST} names a file outside its run: {rel!r}")
    return run_dir / rel


def _run_dirs(runs_dir: Path) -> list[str]:
    """The complete runs: every directory of ``runs/`` that is not a temporary one."""
    try:
        return [e.name for e in os.scandir(runs_dir) if not e.name.startswith(".") and e.is_dir()]
    except FileNotFoundError:
        return []


def _state_in(run_dir: Path, manifest: dict[str, Any]) -> Any:
    """A run's state: lazy, from its Parquet files; a format 1 run's JSON document, read."""
    if "state" in manifest:
        return LazyState(run_dir, manifest["state"])
    return values.loads((run_dir / STATE_FILE).read_bytes())


def _metrics(metrics: Metrics) -> list:
    """Every field of ``metrics`` through the codec; a field of a type it does not know (an
    engine's own report object) is kept as its text rather than failing the record."""
    fields = {}
    for name in Metrics.__dataclass_fields__:
        value = getattr(metrics, name)
        try:
            values.check(value)
        except values.ValueCodecError:
            value = str(value)
        fields[name] = value
    return values.encode(fields)


def _schemas_out(schemas: dict[str, Any]) -> dict[str, str]:
    """Each table's emit schema (Arrow types) as a base64 Arrow IPC schema: data, not code."""
    out = {}
    for name, schema in schemas.items():
        try:
            arrow = pa.schema(list(schema.items()))
            out[name] = base64.b64encode(arrow.serialize().to_pybytes()).decode("ascii")
        except Exception:  # noqa: BLE001 - a schema is a convenience for empty tables
            continue
    return out


def _schemas_in(stored: dict[str, str]) -> dict[str, Any]:
    out = {}
    for name, text in stored.items():
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))
        out[name] = dict(zip(schema.names, schema.types))
    return out


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and x == x and abs(x) != float("inf") else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
