"""Checkpoints: each finished epoch of a replay committed atomically to a directory.

A checkpoint directory holds one sub-directory per committed epoch and a manifest::

    DIR/manifest.json               written last, by an atomic rename: what is committed
    DIR/epoch-000003/state.json     the replay's state after epoch 3 (engine-specific)
    DIR/epoch-000003/rows.json      the output rows epoch 3 emitted (the engine's raw rows)
    DIR/epoch-000003/state-0.parquet  a state store of 512 keys or more, as typed columns
    DIR/epoch-000003/state-1.arrow  an Arrow table inside the state (Arrow IPC file)
    DIR/epoch-000003/rows-0.arrow   a big table's rows of epoch 3, as columns

No file is a pickle: values go through :mod:`restream_kit.model.values` (JSON with type tags), Arrow
tables inside them to ``.arrow`` files, a state store of :data:`MIN_KEYS` keys or more to a
Parquet file of typed key and value columns (:func:`._arrow_stores.store_table`, the layout of
a run's state in the catalog; values Arrow cannot type are a JSON column, and the file's
metadata says so), the timed writes waiting to an ``.arrow`` file of their columns, as
do an epoch's rows of one table when they all have the same fields of plain values, the log's events and scheduled events by their fields,
and a merge function waiting with ``at=`` by reference to the program's code (its name, line
and a digest of its code) with the values of its closure; a replay rebuilds it from its own
program (:func:`restore_serial_state`), so reading a checkpoint never runs code from a file.

An epoch is committed by writing its files into a temporary directory, renaming that to
``epoch-NNNNNN`` and then replacing the manifest, so a replay killed at any moment leaves
either the old manifest or the new one, never a half-written epoch that the manifest names.
Everything is created readable by its owner only (0700 directories, 0600 files).

The manifest's ``identity`` says what the checkpoint is a checkpoint *of*: the program's
hash, the log's fingerprint, the engine and the configuration that sets the epochs. A resume
(``replay(..., checkpoint=DIR, resume=True)``, ``restream replay --checkpoint DIR --resume``)
continues after the last committed epoch only when the identity is the same; otherwise it is
refused with one line saying what differs.

``start_from=(DIR, epoch)`` (or ``start_from=DIR`` for its last committed epoch) starts a
replay of a possibly *changed* program from the state committed after ``epoch``, over the rest
of the same log: the log and the state declarations must match, the handlers may differ.

Engines use a :class:`Checkpointer` (see :func:`open_for_replay`): ``load()`` gives the
:class:`Start` to continue from (or None), ``commit(epoch, done, state, rows)`` commits one
epoch. ``state`` and ``rows`` are values the codec above stores, that the engine reads back;
``state_format`` names that engine-specific form so that one engine never reads another's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model import values
from ..model.errors import RestreamError
from ._arrow_stores import (
    FutureColumns,
    RowsColumns,
    StoreColumns,
    future_columns,
    future_from_table,
    rows_columns,
    rows_from_table,
    store_columns,
    store_from_table,
)
from ._atomic import fsync_path, write_synced
from ._commit_writer import CommitWriter

__all__ = [
    "CheckpointError",
    "Checkpointer",
    "Start",
    "Snapshot",
    "open_for_replay",
    "read",
    "serial_state",
    "restore_serial_state",
    "check_states",
    "ProgramFunction",
    "save_value",
    "load_value",
]

MANIFEST = "manifest.json"
FORMAT = 2  # 1 held pickles, which are no longer read
#: State formats of engines that are gone: their checkpoints are refused in one line.
_RETIRED_STATE_FORMATS = {
    "spark-parallel": "the Spark engine's retired stage path (path='stages'), whose state "
    "held pickled values",
}
_EPOCH_DIR = "epoch-{:06d}"


class CheckpointError(RestreamError):
    """A checkpoint directory that cannot be used: not one, another replay's, or unreadable."""


@dataclass
class Start:
    """Where a replay starts: after epoch ``epoch`` (``done`` events in), with ``state``.

    ``rows`` are the engine's raw output rows of the epochs before (a list per epoch; empty
    for ``start_from``, whose result covers only the events it replays). ``resumed`` tells a
    resume of the same checkpoint from a ``start_from`` of a committed snapshot.
    """

    epoch: int
    done: int
    state: Any
    rows: list[Any] = field(default_factory=list)
    resumed: bool = True
    complete: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def next_epoch(self) -> int:
        """The first epoch still to replay."""
        return self.epoch + 1


def identity(program: Any, log: Any, engine: str, epoch: Any, **config: Any) -> dict[str, Any]:
    """What a checkpoint is a checkpoint of: program, log, engine and epoch configuration."""
    from .epochs import default_epoch_events, parse_epoch

    parsed = parse_epoch(epoch) or ("events", default_epoch_events(len(log)))
    return {
        "program_sha256": program.sha256,
        "log_fingerprint": log.fingerprint,
        "log_events": len(log),
        "engine": engine,
        "epoch": list(parsed),
        **config,
    }


def _describe(key: str, value: Any) -> str:
    if key == "program_sha256":
        return f"program {str(value)[:12]}"
    if key == "log_fingerprint":
        return f"log {value}"
    return f"{key} {value!r}"


class Checkpointer:
    """A checkpoint directory being written by one replay (see the module docstring)."""

    def __init__(
        self,
        directory: str | Path,
        ident: dict[str, Any],
        *,
        state_format: str,
        resume: bool = False,
    ):
        self.directory = Path(directory)
        self.identity = ident
        self.state_format = state_format
        self.resume = resume
        self.manifest = _open_dir(self.directory, create=True)
        if self.manifest is not None:
            committed = self.manifest.get("epochs", [])
            if not resume:
                raise CheckpointError(
                    f"checkpoint {self.directory} already holds {_committed_text(self.manifest)}; "
                    "pass --resume (resume=True) to continue it, or choose another directory"
                )
            _check_identity(self.directory, self.manifest["identity"], ident)
            if committed and self.manifest.get("state_format") != state_format:
                raise CheckpointError(
                    f"checkpoint {self.directory} holds {self.manifest.get('state_format')} "
                    f"state, this replay keeps {state_format} state"
                )
        else:
            self.manifest = self._fresh()
        self._writer: CommitWriter | None = None

    def _fresh(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "identity": self.identity,
            "state_format": self.state_format,
            "epochs": [],
            "complete": False,
        }

    # -- reading -------------------------------------------------------------------------

    def load(self) -> Start | None:
        """The last committed epoch to continue after, or None when nothing is committed."""
        epochs = self.manifest["epochs"]
        if not epochs:
            return None
        last = epochs[-1]
        rows = [load_value(self.directory / e["dir"], "rows") for e in epochs]
        state = load_value(self.directory / last["dir"], "state")
        return Start(
            epoch=last["epoch"],
            done=last["done"],
            state=state,
            rows=rows,
            resumed=True,
            complete=bool(self.manifest.get("complete")),
            info=dict(last.get("info", {})),
        )

    # -- writing -------------------------------------------------------------------------

    def commit(
        self,
        epoch: int,
        done: int,
        state: Any,
        rows: Any,
        *,
        last: bool = False,
        info: dict[str, Any] | None = None,
    ) -> None:
        """Commit epoch ``epoch`` (``done`` events replayed in all): state, rows, manifest."""
        name = _EPOCH_DIR.format(epoch)
        tmp = self.directory / f".tmp-{name}-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(mode=0o700)
        save_value(tmp, "state", state, "the state")
        save_value(tmp, "rows", rows, "the output rows")
        fsync_path(tmp)
        final = self.directory / name
        if final.exists():  # left by a run killed between this rename and its manifest
            shutil.rmtree(final)
        os.rename(tmp, final)
        entry = {"epoch": epoch, "done": done, "dir": name, "info": info or {}}
        epochs = [e for e in self.manifest["epochs"] if e["epoch"] < epoch] + [entry]
        manifest = {**self.manifest, "epochs": epochs, "complete": bool(last)}
        write_synced(self.directory / f".{MANIFEST}.tmp", json.dumps(manifest, indent=1).encode())
        os.replace(self.directory / f".{MANIFEST}.tmp", self.directory / MANIFEST)
        fsync_path(self.directory)
        self.manifest = manifest

    def commit_soon(
        self, epoch: int, done: int, state: Any, rows: Any, *, last: bool = False
    ) -> None:
        """:meth:`commit` on the checkpoint's writer thread, after the commits given before
        (``_commit_writer``): the caller goes on meanwhile, and must not change ``state`` or
        ``rows`` after. :meth:`flush` waits for them."""
        if self._writer is None:
            self._writer = CommitWriter()
        self._writer.put(lambda: self.commit(epoch, done, state, rows, last=last))

    def flush(self) -> None:
        """Wait until every commit given to :meth:`commit_soon` is written; raise the first
        that failed."""
        if self._writer is not None:
            self._writer.wait()


# -- snapshots: committed epochs read back --------------------------------------------------


@dataclass
class Snapshot:
    """The state committed after one epoch of a checkpoint, to start another replay from."""

    directory: Path
    epoch: int
    done: int
    identity: dict[str, Any]
    state_format: str
    state: Any
    info: dict[str, Any]


def read(directory: str | Path, epoch: int | None = None) -> Snapshot:
    """The snapshot after ``epoch`` (the last committed one when None) of checkpoint ``directory``."""
    directory = Path(directory)
    manifest = _open_dir(directory, create=False)
    if manifest is None:
        raise CheckpointError(f"start_from: {directory} holds no committed epoch")
    epochs = manifest.get("epochs", [])
    if not epochs:
        raise CheckpointError(f"start_from: {directory} holds no committed epoch")
    if epoch is None:
        entry = epochs[-1]
    else:
        if epoch < 0:
            epoch = epochs[-1]["epoch"] + 1 + epoch
        found = [e for e in epochs if e["epoch"] == epoch]
        if not found:
            raise CheckpointError(
                f"start_from: {directory} has no committed epoch {epoch} "
                f"(committed: {epochs[0]['epoch']}..{epochs[-1]['epoch']})"
            )
        entry = found[0]
    return Snapshot(
        directory=directory,
        epoch=entry["epoch"],
        done=entry["done"],
        identity=manifest["identity"],
        state_format=manifest["state_format"],
        state=load_value(directory / entry["dir"], "state"),
        info=dict(entry.get("info", {})),
    )


def open_for_replay(
    program: Any,
    log: Any,
    *,
    engine: str,
    epoch: Any,
    state_format: str,
    checkpoint: str | Path | None = None,
    resume: bool = False,
    start_from: Any = None,
    **config: Any,
) -> tuple[Checkpointer | None, Start | None]:
    """The checkpointer of a replay (None without ``checkpoint``) and where it starts.

    A resume of ``checkpoint`` wins over ``start_from``. For ``start_from`` the log must be
    the same; the engine's own check of the state (:func:`check_states` for the serial one)
    says whether the program's state declarations fit.
    """
    if resume and checkpoint is None:
        raise CheckpointError("resume needs a checkpoint directory (--checkpoint DIR)")
    snap = None
    if start_from is not None:
        snap = _start_snapshot(start_from)
        _check_start(snap, log, engine, state_format)
    ident = identity(program, log, engine, epoch, **config)
    if snap is not None:
        ident["start_from"] = {
            "checkpoint": str(snap.directory.resolve()),
            "epoch": snap.epoch,
            "program_sha256": snap.identity.get("program_sha256"),
        }
    ck = None
    if checkpoint is not None:
        ck = Checkpointer(checkpoint, ident, state_format=state_format, resume=resume)
        start = ck.load()
        if start is not None:
            return ck, start
    if snap is None:
        return ck, None
    start = Start(
        epoch=snap.epoch,
        done=snap.done,
        state=snap.state,
        rows=[],
        resumed=False,
        info={**snap.info, "start_from": str(snap.directory), "from_epoch": snap.epoch},
    )
    return ck, start


def _start_snapshot(start_from: Any) -> Snapshot:
    if isinstance(start_from, Snapshot):
        return start_from
    if isinstance(start_from, (str, os.PathLike)):
        return read(start_from)
    if isinstance(start_from, tuple) and len(start_from) == 2:
        directory, epoch = start_from
        if not isinstance(epoch, int):
            raise CheckpointError(f"start_from=(DIR, epoch): epoch must be an int, not {epoch!r}")
        return read(directory, epoch)
    raise CheckpointError(
        f"start_from must be a checkpoint directory or (directory, epoch), not {start_from!r}"
    )


def _check_start(snap: Snapshot, log: Any, engine: str, state_format: str) -> None:
    ident = snap.identity
    if ident.get("log_fingerprint") != log.fingerprint or ident.get("log_events") != len(log):
        raise CheckpointError(
            f"start_from: {snap.directory} is a checkpoint of another log "
            f"({ident.get('log_fingerprint')}, {ident.get('log_events')} events; this log is "
            f"{log.fingerprint}, {len(log)} events)"
        )
    if snap.state_format != state_format:
        raise CheckpointError(
            f"start_from: {snap.directory} holds {snap.state_format} state (made with engine "
            f"{ident.get('engine')!r}); this replay on {engine!r} keeps {state_format} state"
        )


def check_states(program: Any, saved: dict[str, list], where: str) -> list[str]:
    """Check that ``program``'s states fit ``saved`` (name -> [kind, repr(default)]).

    A saved state the program no longer declares, or one declared with another kind or
    default, is refused; a state the program adds starts empty (returned as notes).
    """
    notes = []
    for name, (kind, default) in saved.items():
        decl = program.states.get(name)
        if decl is None:
            raise CheckpointError(
                f"{where}: the snapshot has state {name!r}, which the program no longer declares"
            )
        if [decl.kind, repr(decl.default)] != [kind, default]:
            raise CheckpointError(
                f"{where}: state {name!r} was {kind}(default={default}) in the snapshot, "
                f"the program declares {decl.kind}(default={decl.default!r})"
            )
    for name in program.states:
        if name not in saved:
            notes.append(f"{where}: state {name!r} is new, it starts empty")
    return notes


def state_declarations(program: Any) -> dict[str, list]:
    """Name -> [kind, repr(default)] of every declared state, as :func:`check_states` reads."""
    return {name: [decl.kind, repr(decl.default)] for name, decl in program.states.items()}


# -- the serial engine's state --------------------------------------------------------------


def serial_state(rt: Any, stores: dict[str, dict], program: Any) -> dict[str, Any]:
    """The serial runtime's state between epochs, as plain data (see save_value).

    That is every store, the timed writes still pending (their store by name), the scheduled
    events still pending, the counter that orders both, and each log event's count of
    scheduled events (the ``seq`` of the next one).
    """
    by_id = {id(d): name for name, d in stores.items()}
    future = [(at, n, by_id[id(d)], op, key, arg) for at, n, d, _dflt, op, key, arg in rt.future]
    order = next(rt.order)
    rt.order = _count(order)
    return {
        "states": state_declarations(program),
        # Plain dicts: on_error stores are journaling dict subclasses.
        "stores": {name: dict(d) for name, d in stores.items()},
        "future": future,
        "scheduled": list(rt.scheduled),
        "order": order,
        "scheduled_per_root": dict(rt.scheduled_per_root),
        "quarantined": list(getattr(rt, "quarantined", ())),
    }


def restore_serial_state(
    rt: Any,
    stores: dict[str, dict],
    program: Any,
    state: dict[str, Any],
    *,
    outputs: bool = True,
    namespace: dict[str, Any] | None = None,
) -> None:
    """Put ``state`` (from :func:`serial_state`) back into a fresh runtime and its stores.

    ``outputs`` False (a ``start_from``) leaves out the handler runs quarantined before.
    Merge functions read from a checkpoint (:class:`ProgramFunction`) are rebuilt from the
    program's own code in ``namespace`` (the compiled program's globals; when None, the
    program is compiled again against ``rt`` and ``stores`` to find them).
    """
    for name, saved in state["stores"].items():
        # dict.update: an on_error store must not journal what it is restored to.
        dict.clear(stores[name])
        dict.update(stores[name], saved)
    if outputs and hasattr(rt, "quarantined"):
        rt.quarantined[:] = state.get("quarantined", [])
    defaults = {name: decl.default for name, decl in program.states.items()}
    future = state["future"]
    if any(isinstance(entry[5], ProgramFunction) for entry in future):
        if namespace is None:
            from ..compiler.compile import compile_program

            namespace = compile_program(program, rt, stores).namespace
        codes = _program_codes(namespace, program.filename)
        future = [
            (*entry[:5], entry[5].rebuild(codes, namespace))
            if isinstance(entry[5], ProgramFunction)
            else entry
            for entry in future
        ]
    rt.future[:] = [
        (at, n, stores[name], defaults[name], op, key, arg) for at, n, name, op, key, arg in future
    ]
    rt.scheduled[:] = state["scheduled"]
    rt.order = _count(state["order"])
    rt.scheduled_per_root.clear()
    rt.scheduled_per_root.update(state["scheduled_per_root"])


def _count(start: int):
    import itertools

    return itertools.count(start)


# -- files ---------------------------------------------------------------------------------


def _open_dir(directory: Path, *, create: bool) -> dict[str, Any] | None:
    """The manifest of ``directory``, None when it is new or empty; refuse what is not one."""
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(f"checkpoint {directory} is a file, not a directory")
    manifest_path = directory / MANIFEST
    if not directory.exists():
        if create:
            directory.mkdir(parents=True, mode=0o700)
            os.chmod(directory, 0o700)
        return None
    if not manifest_path.exists():
        others = [p.name for p in directory.iterdir() if not p.name.startswith(".tmp-")]
        if others:
            raise CheckpointError(
                f"checkpoint {directory} is not empty and is not a restream checkpoint "
                f"(no {MANIFEST}; it holds {others[0]!r}); choose an empty or new directory"
            )
        return None
    try:
        manifest = json.loads(manifest_path.read_text())
        manifest["identity"], manifest["epochs"]  # noqa: B018 - the keys must be there
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(
            f"{manifest_path} is not a restream checkpoint manifest: {exc}"
        ) from None
    if manifest.get("format") != FORMAT:
        raise CheckpointError(
            f"{manifest_path} has checkpoint format {manifest.get('format')!r}; "
            f"this restream_kit reads format {FORMAT}"
            + (
                " (format 1 held pickles, which are never read: they could run code)"
                if manifest.get("format") == 1
                else ""
            )
        )
    retired = _RETIRED_STATE_FORMATS.get(manifest.get("state_format"))
    if retired:
        raise CheckpointError(
            f"checkpoint {directory} was written by {retired}; no engine reads it any more: "
            "replay again into a new directory"
        )
    return manifest


def _check_identity(directory: Path, saved: dict[str, Any], current: dict[str, Any]) -> None:
    keys = dict.fromkeys([*saved, *current])
    diffs = [k for k in keys if saved.get(k) != current.get(k)]
    if not diffs:
        return
    parts = [
        f"{_describe(k, saved.get(k))} there, {_describe(k, current.get(k))} here" for k in diffs
    ]
    what = {
        "program_sha256": "another program version",
        "log_fingerprint": "another log",
        "log_events": "another log",
        "engine": "another engine",
    }
    reason = next((what[k] for k in diffs if k in what), "another engine configuration")
    raise CheckpointError(
        f"checkpoint {directory} was made by {reason} ({'; '.join(parts)}); "
        "use a new directory (or start_from= to start a changed program from its state)"
    )


def _committed_text(manifest: dict[str, Any]) -> str:
    epochs = manifest.get("epochs", [])
    if not epochs:
        return "a checkpoint with no committed epoch"
    done = "complete" if manifest.get("complete") else "incomplete"
    return f"a checkpoint of epochs {epochs[0]['epoch']}..{epochs[-1]['epoch']} ({done})"


def _culprit(value: Any, hook: Any) -> str | None:
    """Which store and key hold a value the codec (with ``hook``) cannot store, for the
    error message."""
    stores = value.get("stores") if isinstance(value, dict) else None
    if not isinstance(stores, dict):
        return None
    for name, store in stores.items():
        for key, v in store.items():
            try:
                values.encode(v, hook)
            except Exception:  # noqa: BLE001
                return f"state {name!r} key {key!r} holds {type(v).__name__} {v!r:.60}: "
    return None


# -- the on-disk codec: JSON with type tags, Arrow files, no pickle ------------------------


def save_value(directory: Path, stem: str, value: Any, what: str) -> None:
    """Write ``value`` as ``directory/<stem>.json`` (Arrow tables in it as ``<stem>-N.arrow``).

    A value the codec cannot store is a :class:`CheckpointError` naming it (and, for a
    replay's state, the state and key that hold it).
    """
    tables: list[Any] = []
    original, value = value, _with_store_tables(value)
    if stem == "rows":
        value = _with_rows_tables(value)

    def hook(v: Any) -> tuple[str, Any] | None:
        import pyarrow as pa

        if isinstance(v, pa.Table):
            name = f"{stem}-{len(tables)}.arrow"
            tables.append((name, v))
            return "arrow", name
        if type(v) is _StoreTable:  # a state store: typed Parquet, as a run's state
            name = f"{stem}-{len(tables)}.parquet"
            tables.append((name, v.table))
            return "store", [name, v.arity]
        if type(v) is _RowsTable:
            name = f"{stem}-{len(tables)}.arrow"
            tables.append((name, v.table))
            return "rows", name
        if type(v) is _FutureTable:
            name = f"{stem}-{len(tables)}.arrow"
            tables.append((name, v.table))
            return "future", [name, v.arity]
        return _encode_special(v, hook)

    try:
        data = values.dumps(value, hook)
    except (values.ValueCodecError, RecursionError) as exc:
        culprit = _culprit(original, hook)
        raise CheckpointError(
            f"cannot save {what} in the checkpoint: {culprit or ''}{exc}"
        ) from None
    for name, table in tables:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if name.endswith(".parquet"):
            pq.write_table(table, directory / name)
        else:
            with pa.OSFile(str(directory / name), "wb") as sink:
                with pa.ipc.new_file(sink, table.schema) as writer:
                    writer.write_table(table)
        os.chmod(directory / name, 0o600)
        fsync_path(directory / name)
    write_synced(directory / f"{stem}.json", data)


def load_value(directory: Path, stem: str) -> Any:
    """The value :func:`save_value` wrote (building only plain values, tables and events)."""
    path = directory / f"{stem}.json"

    def arrow(name: Any) -> Any:
        import pyarrow as pa

        if not isinstance(name, str) or "/" in name or not name.endswith((".arrow", ".parquet")):
            raise values.ValueCodecError(f"bad Arrow file reference {name!r}")
        if name.endswith(".parquet"):
            import pyarrow.parquet as pq

            return pq.read_table(directory / name)
        with pa.memory_map(str(directory / name)) as source:
            return pa.ipc.open_file(source).read_all()

    def built(name: Any, build: Any, *args: Any) -> Any:
        try:
            return build(arrow(name), *args)
        except ValueError as exc:  # a table that is not what its tag says: damaged or not ours
            raise values.ValueCodecError(f"{name}: {exc}") from None

    def keyed(payload: Any, build: Any) -> Any:
        name, arity = payload  # (a store's or timed writes' key shape: see _arrow_stores)
        if arity is not None and (type(arity) is not int or arity < 1):
            raise values.ValueCodecError(f"bad key shape {arity!r}")
        return built(name, build, arity)

    decoders = {
        "arrow": arrow,
        "store": lambda payload: keyed(payload, store_from_table),
        "future": lambda payload: keyed(payload, future_from_table),
        "rows": lambda name: built(name, rows_from_table),
    }
    try:
        data = path.read_bytes()
        return values.loads(data, {**decoders, **_DECODERS})
    except (OSError, values.ValueCodecError) as exc:
        raise CheckpointError(f"cannot read checkpoint file {path}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - Arrow errors: a damaged file, said in one line
        raise CheckpointError(f"cannot read checkpoint file {path}: {exc}") from None


@dataclass
class _StoreTable:
    """A state store headed for its own Arrow file (see :mod:`._arrow_stores`)."""

    table: Any
    arity: int | None


def _with_store_tables(value: Any) -> Any:
    """``value`` (a replay's state) with each big store of plain keys and values as a
    :class:`_StoreTable`, and many timed writes of plain keys and values as a
    :class:`_FutureTable`; anything else as it is. The caller's dicts are not changed."""
    stores = value.get("stores") if type(value) is dict else None
    if type(stores) is not dict:
        return value
    swapped = {}
    for name, store in stores.items():
        if type(store) is StoreColumns:  # columns already: committed as they are
            swapped[name] = _StoreTable(store.table, store.arity)
            continue
        columns = store_columns(store, plain=False) if type(store) is dict else None
        swapped[name] = store if columns is None else _StoreTable(*columns)
    value = {**value, "stores": swapped}
    future = value.get("future")
    if type(future) is FutureColumns:  # columns already: committed as they are
        value["future"] = _FutureTable(future.table, future.arity)
        return value
    columns = future_columns(future) if type(future) is list else None
    if columns is not None:
        value["future"] = _FutureTable(*columns)
    return value


@dataclass
class _FutureTable:
    """The timed writes waiting in a replay's state, headed for their own Arrow file."""

    table: Any
    arity: int | None


@dataclass
class _RowsTable:
    """One table's rows of an epoch headed for their own Arrow file (``_arrow_stores``)."""

    table: Any


def _with_rows_tables(value: Any) -> Any:
    """An epoch's rows (table -> rows) with each big table's rows as a :class:`_RowsTable`
    when they fit (rows an engine gives as columns already, ``RowsColumns``, as they are);
    anything else as it is."""
    if type(value) is not dict:
        return value
    swapped = {}
    for name, rows in value.items():
        if type(rows) is RowsColumns:
            swapped[name] = _RowsTable(rows.table)
            continue
        table = rows_columns(rows) if type(rows) is list else None
        swapped[name] = rows if table is None else _RowsTable(table)
    return swapped


def _encode_special(v: Any, hook: Any) -> tuple[str, Any] | None:
    """Events and merge functions of a replay's state (see the module docstring)."""
    t = type(v)
    if isinstance(v, tuple) and t.__name__ == "Event" and hasattr(t, "_fields"):
        # The log's events: named tuples of a class made per log (Log.event_type).
        return "event", [list(t._fields), values.encode(list(v), hook)]
    if t.__name__ == "ScheduledEvent" and t.__module__.endswith("runtime.semantics"):
        return "sched", values.encode(dict(v.__dict__), hook)
    if t is ProgramFunction:
        return "fn", values.encode(v.as_dict(), hook)
    if t is types.FunctionType:
        return "fn", values.encode(ProgramFunction.of(v).as_dict(), hook)
    return None


_EVENT_TYPES: dict[tuple[str, ...], type] = {}


def _event(payload: Any) -> Any:
    from collections import namedtuple

    fields, items = payload
    fields = tuple(fields)
    if not all(isinstance(f, str) and f.isidentifier() for f in fields):
        raise values.ValueCodecError(f"bad event fields {fields!r}")
    cls = _EVENT_TYPES.get(fields)
    if cls is None:
        cls = _EVENT_TYPES[fields] = namedtuple("Event", fields)
    return tuple.__new__(cls, _decode_nested(items))


def _scheduled(payload: Any) -> Any:
    from ..runtime import ScheduledEvent

    fields = _decode_nested(payload)
    return ScheduledEvent(
        fields.pop("kind"), fields.pop("ts"), fields.pop("lsn"), fields.pop("seq"), fields
    )


def _function(payload: Any) -> Any:
    return ProgramFunction(**_decode_nested(payload))


def _decode_nested(payload: Any) -> Any:
    return values.decode(payload, _DECODERS)


_DECODERS = {"event": _event, "sched": _scheduled, "fn": _function}


@dataclass
class ProgramFunction:
    """A function of the program (a merge waiting with ``at=``), as a checkpoint keeps it.

    Not code: the function's name, first line and a digest of its compiled code, which find
    it again in the program being replayed, and the values its closure and defaults held.
    """

    name: str
    line: int
    digest: str
    closure: tuple = ()
    defaults: tuple | None = None
    kwdefaults: dict | None = None

    @classmethod
    def of(cls, fn: types.FunctionType) -> ProgramFunction:
        """The reference to ``fn``; its closure's values must be ones the codec stores."""
        try:
            closure = tuple(c.cell_contents for c in fn.__closure__ or ())
        except ValueError:
            raise values.ValueCodecError(
                f"function {fn.__qualname__} refers to a variable not yet assigned", fn
            ) from None
        return cls(
            name=fn.__code__.co_name,
            line=fn.__code__.co_firstlineno,
            digest=_code_digest(fn.__code__),
            closure=closure,
            defaults=fn.__defaults__,
            kwdefaults=fn.__kwdefaults__,
        )

    def as_dict(self) -> dict[str, Any]:
        """The fields, for the codec."""
        return {
            "name": self.name,
            "line": self.line,
            "digest": self.digest,
            "closure": tuple(self.closure),
            "defaults": self.defaults,
            "kwdefaults": self.kwdefaults,
        }

    def rebuild(self, codes: dict[tuple, types.CodeType], namespace: dict[str, Any]) -> Any:
        """The function again, from the program's own code found in ``codes``."""
        code = codes.get((self.name, self.line, self.digest))
        if code is None or len(code.co_freevars) != len(self.closure):
            raise CheckpointError(
                f"the checkpoint holds a merge function waiting with at= ({self.name} at line "
                f"{self.line}) that this program does not have (changed since?)"
            )
        fn = types.FunctionType(
            code,
            namespace,
            self.name,
            self.defaults,
            tuple(types.CellType(v) for v in self.closure),
        )
        fn.__kwdefaults__ = self.kwdefaults
        return fn

    def __call__(self, *_args: Any) -> Any:
        raise CheckpointError(
            f"merge function {self.name} (line {self.line}) was read from a checkpoint and not "
            "rebuilt: restore_serial_state rebuilds it from the program"
        )


def _code_digest(code: types.CodeType) -> str:
    """A digest of compiled code that is the same in every process (no ids, no hash order)."""
    h = hashlib.sha256()
    for part in (code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
        h.update(repr(part).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            h.update(_code_digest(const).encode())
        elif isinstance(const, frozenset):
            h.update(repr(sorted(map(repr, const))).encode())
        else:
            h.update(repr(const).encode())
    return h.hexdigest()


def _program_codes(namespace: dict[str, Any], filename: str) -> dict[tuple, types.CodeType]:
    """Every code object of the program's functions in ``namespace``, nested ones included."""
    found: dict[tuple, types.CodeType] = {}
    todo = [
        v.__code__
        for v in namespace.values()
        if isinstance(v, types.FunctionType) and v.__code__.co_filename == filename
    ]
    while todo:
        code = todo.pop()
        key = (code.co_name, code.co_firstlineno, _code_digest(code))
        if key in found:
            continue
        found[key] = code
        todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return found
