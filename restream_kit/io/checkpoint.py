"""Checkpoints: each finished epoch of a replay committed atomically to a directory.

A checkpoint directory holds one sub-directory per committed epoch and a manifest::

    DIR/manifest.json               written last, by an atomic rename: what is committed
    DIR/epoch-000003/state.json     the replay's state after epoch 3 (engine-specific)
    DIR/epoch-000003/rows.json      the output rows epoch 3 emitted (the engine's raw rows)
    DIR/epoch-000003/state-0.parquet  a state store of 512 keys or more, as typed columns
    DIR/epoch-000003/state-1.arrow  an Arrow table inside the state (Arrow IPC file)
    DIR/epoch-000003/rows-0.arrow   a big table's rows of epoch 3, as columns (the Spark
                                    engine reads its tables back from these: _committed_tables)

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

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._atomic import fsync_path, write_synced
from ._checkpoint_codec import (
    CheckpointError,
    ProgramFunction,
    load_value,
    save_value,
)
from ._commit_writer import CommitWriter
from ._serial_state import restore_serial_state, serial_state, state_declarations

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
    "state_declarations",
]

MANIFEST = "manifest.json"
FORMAT = 2  # 1 held pickles, which are no longer read
#: State formats of engines that are gone: their checkpoints are refused in one line.
_RETIRED_STATE_FORMATS = {
    "spark-parallel": "the Spark engine's retired stage path (path='stages'), whose state "
    "held pickled values",
}
_EPOCH_DIR = "epoch-{:06d}"


@dataclass
class Start:
    """Where a replay starts: after epoch ``epoch`` (``done`` events in), with ``state``.

    ``rows`` are the engine's raw output rows of the epochs before (a list per epoch; empty
    for ``start_from``, whose result covers only the events it replays, and when the engine
    asked not to read them: it reads its tables from the checkpoint, ``_committed_tables``);
    ``tables`` the names of the tables emitted before, in order of first emission.
    ``resumed`` tells a resume of the same checkpoint from a ``start_from`` of a committed
    snapshot.
    """

    epoch: int
    done: int
    state: Any
    rows: list[Any] = field(default_factory=list)
    resumed: bool = True
    complete: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    tables: list[str] = field(default_factory=list)

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

    def load(self, *, rows: bool = True) -> Start | None:
        """The last committed epoch to continue after, or None when nothing is committed;
        without ``rows``, the committed rows are left in the checkpoint, unread (only the
        names of their tables, from the last epoch's: every epoch names every table so far)."""
        epochs = self.manifest["epochs"]
        if not epochs:
            return None
        last = epochs[-1]
        if rows:
            rows = [load_value(self.directory / e["dir"], "rows") for e in epochs]
            tables = list(dict.fromkeys(name for some in rows for name in some))
        else:
            rows = []
            tables = list(load_value(self.directory / last["dir"], "rows", rows_files=True))
        state = load_value(self.directory / last["dir"], "state")
        return Start(
            epoch=last["epoch"],
            done=last["done"],
            state=state,
            rows=rows,
            resumed=True,
            complete=bool(self.manifest.get("complete")),
            info=dict(last.get("info", {})),
            tables=tables,
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
    rows: bool = True,
    **config: Any,
) -> tuple[Checkpointer | None, Start | None]:
    """The checkpointer of a replay (None without ``checkpoint``) and where it starts
    (its committed rows read only with ``rows``: see :meth:`Checkpointer.load`).

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
        start = ck.load(rows=rows)
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
