"""One run directory of the catalog: what it holds, how it is written and read back.

``manifest.json`` lists the run (program, log, engine, parameters, timings, metrics, the
files and their sizes); the output tables are ``<table>.parquet`` (numbered under
``tables/`` when a name is not a plain file name), the final state typed Parquet under
``state/`` (:mod:`._state_files`; format 1 runs: ``state.json``), the quarantine
``_quarantine.parquet`` and the history ``history/``. :class:`~restream_kit.io.catalog.Catalog`
names, lists and renames the directories; this module writes and reads one.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..model import values
from ..model.errors import RestreamError
from ._atomic import fsync_path, write_synced
from ._parquet import read_parquet
from ._state_files import LazyState, write_state
from ._table_files import write_table
from .result import QUARANTINE_FILE, Metrics, Result, quarantine_table

__all__ = [
    "CatalogError",
    "FORMAT",
    "HISTORY_DIR",
    "MANIFEST",
    "QUARANTINE",
    "READS",
    "disk_size",
    "read_manifest",
    "read_result",
    "write_run",
]

#: The run directory format this module writes (``manifest.json``'s ``format``): 2 keeps
#: the state as Parquet (``state/``), 1 as one JSON document (``state.json``), still read.
FORMAT = 2
READS = (1, 2)
MANIFEST = "manifest.json"
STATE_FILE = "state.json"  # format 1
QUARANTINE = QUARANTINE_FILE  # "_quarantine.parquet", apart from the tables
#: The folder of a run directory that holds its history (``restream_kit.history``).
HISTORY_DIR = "history"
#: Table names written as ``<name>.parquet``; others go to ``tables/NNNN.parquet``.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}$")


class CatalogError(RestreamError):
    """A run that cannot be found or read back (forgotten, damaged, from an old catalog)."""


def write_run(
    tmp, run_id, now, name, program, log, engine, result, master, params, error
) -> dict[str, Any]:
    """Write run ``run_id`` into the directory ``tmp``: its tables, quarantine, history and
    state, then its manifest (listing every file and its size); return the manifest."""
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


def read_manifest(run_dir: Path, run_id: str, home: Path) -> dict[str, Any]:
    """The manifest of run ``run_id`` in ``run_dir`` (a dict), of the catalog at ``home``."""
    path = run_dir / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise CatalogError(f"run {run_id} is not in the catalog {home} (forgotten?)") from None
    except (OSError, ValueError) as exc:
        raise CatalogError(f"run {run_id}: {path} cannot be read: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") not in READS:
        fmt = manifest.get("format") if isinstance(manifest, dict) else None
        newer = (
            f" (format {fmt}, from a newer restream)"
            if isinstance(fmt, int) and fmt > FORMAT
            else ""
        )
        raise CatalogError(f"run {run_id}: {path} is not a restream run manifest{newer}")
    return manifest


def read_result(out_dir: Path, run_id: str, manifest: dict[str, Any]) -> Result:
    """The result stored in run ``run_id``'s directory ``out_dir``, as its manifest lists it:
    tables, final state (lazy), metrics, schemas, quarantine (no code is run)."""
    try:
        tables = {
            name: read_parquet(_inside(out_dir, rel)) for name, rel in manifest["tables"].items()
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


def disk_size(run_dir: str | Path) -> int:
    """Bytes the history of the run in ``run_dir`` takes on disk (0 without one)."""
    where = Path(run_dir) / HISTORY_DIR
    return sum(p.stat().st_size for p in where.rglob("*") if p.is_file()) if where.exists() else 0


def _inside(run_dir: Path, rel: str) -> Path:
    """``run_dir / rel``, refusing a manifest that points outside its run."""
    if not isinstance(rel, str) or rel.startswith("/") or ".." in Path(rel).parts:
        raise CatalogError(f"{run_dir / MANIFEST} names a file outside its run: {rel!r}")
    return run_dir / rel


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
