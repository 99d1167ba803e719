"""A run's final state as typed Parquet, one file per state, read only when used.

Each state of a run is ``state/NNNN.parquet`` in its directory: a table of key columns and a
value column (:func:`._arrow_stores.store_table`: ``int64``, ``double``, ``bool``,
``string``, structs for tuples, lists for lists and sets, a JSON-text column only for values
Arrow cannot type), with the specs that read it back in the file's metadata. The run's
manifest lists, per state, its file, its number of keys and those specs, so a reader knows
what a file holds without opening it.

A loaded run's state is a :class:`LazyState`: a mapping of state names to
:class:`LazyStore`\\ s, each of which reads its file the first time a key or value is asked
for (its length comes from the manifest). A store passed on unread, as a re-replay passes
the states it reuses, is recorded again by linking its file: neither decoded nor encoded.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from ..model import values
from ..model.errors import StateError
from ._arrow_stores import STORE_META, store_from_table, store_table
from ._parquet import read_parquet

__all__ = ["STATE_DIR", "write_state", "LazyState", "LazyStore", "recorded_state"]

#: The folder of a run directory that holds its state files.
STATE_DIR = "state"


def write_state(run_dir: Path, state: Mapping[str, Mapping]) -> dict[str, dict[str, Any]]:
    """Write every state of ``state`` under ``run_dir/state/``; return the manifest's
    ``state`` entry (name -> file, keys, columns). A key or value that cannot be stored is a
    :class:`StateError` naming the state and key."""
    entries: dict[str, dict[str, Any]] = {}
    if state:
        (run_dir / STATE_DIR).mkdir(mode=0o700)
    for i, (name, store) in enumerate(state.items()):
        rel = f"{STATE_DIR}/{i:04d}.parquet"
        if type(store) is LazyStore:  # unchanged since it was recorded: the same file
            _link(store.path, run_dir / rel)
            entries[name] = {"file": rel, "keys": len(store), "columns": store.columns}
            continue
        try:
            table = store_table(store)
        except values.ValueCodecError:
            raise _unstorable(name, dict(store)) from None
        pq.write_table(table, run_dir / rel)
        specs = _specs(table.schema.metadata)
        entries[name] = {"file": rel, "keys": table.num_rows, "columns": specs}
    return entries


def recorded_state(state: Mapping[str, Mapping], run_dir: Path, entries: dict) -> dict:
    """``state`` (a run's states in memory) as :class:`LazyStore`\\ s over the files it was
    recorded to (``entries``: its manifest's ``state``), holding the same values, so that a
    run reusing them records them again by linking those files. A state that is not a plain
    dict of as many keys as its file stays as it is."""
    out: dict[str, Mapping] = {}
    for name, store in state.items():
        entry = entries.get(name)
        if type(store) is dict and entry is not None and int(entry["keys"]) == len(store):
            rel = entry["file"]
            if isinstance(rel, str) and not rel.startswith("/") and ".." not in Path(rel).parts:
                store = LazyStore(run_dir / rel, len(store), entry.get("columns"), data=store)
        out[name] = store
    return out


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)  # files of a run never change: sharing one is safe
    except OSError:
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o600)


def _specs(metadata: dict | None) -> dict[str, Any]:
    return json.loads((metadata or {})[STORE_META.encode()])["columns"]


def _unstorable(name: str, store: dict) -> StateError:
    bad = values.unstorable(store)
    if bad is None:  # pragma: no cover - store_table refused something check() accepts
        return StateError(f"state {name!r} cannot be stored")
    key, what, obj, exc = bad
    # The words of the serial engine's check_state, on every engine.
    return StateError(
        f"state {name!r}, key {key!r}: the {what} {obj!r:.80} cannot be "
        f"serialized ({exc}); state must hold plain values"
    )


class LazyStore(Mapping):
    """One state of a recorded run, read from its Parquet file when first used."""

    def __init__(
        self, path: Path, keys: int, columns: dict[str, Any] | None = None, data: dict | None = None
    ):
        self.path = Path(path)
        self.columns = columns or {}
        self._keys = keys
        self._data: dict | None = data  # given: the values the file holds, already in memory

    @property
    def loaded(self) -> bool:
        """Whether the file has been read."""
        return self._data is not None

    def _dict(self) -> dict:
        if self._data is None:
            try:
                self._data = store_from_table(read_parquet(self.path))
            except FileNotFoundError:
                raise StateError(
                    f"the state file {self.path} is gone (its run forgotten meanwhile?)"
                ) from None
            except (OSError, ValueError, values.ValueCodecError) as exc:
                raise StateError(f"the state file {self.path} cannot be read: {exc}") from None
        return self._data

    def __getitem__(self, key: Any) -> Any:
        return self._dict()[key]

    def __iter__(self) -> Iterator:
        return iter(self._dict())

    def __len__(self) -> int:
        return self._keys if self._data is None else len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._dict()

    def keys(self):  # noqa: D102 - a dict's views, at C speed
        return self._dict().keys()

    def values(self):  # noqa: D102
        return self._dict().values()

    def items(self):  # noqa: D102
        return self._dict().items()

    def get(self, key: Any, default: Any = None) -> Any:  # noqa: D102
        return self._dict().get(key, default)

    def copy(self) -> dict:
        """The state as a new dict."""
        return dict(self._dict())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._dict() == (other._dict() if type(other) is LazyStore else dict(other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment] - a mapping is not hashable

    def __repr__(self) -> str:
        return repr(self._dict())


class LazyState(dict):
    """A recorded run's states by name, each a :class:`LazyStore` (nothing read yet): a dict,
    as a replay's ``Result.state`` is, that only shows itself without reading."""

    def __init__(self, run_dir: Path, entries: dict[str, dict[str, Any]]):
        super().__init__()
        for name, entry in entries.items():
            rel = entry["file"]
            if not isinstance(rel, str) or rel.startswith("/") or ".." in Path(rel).parts:
                raise ValueError(f"the state {name!r} names a file outside its run: {rel!r}")
            self[name] = LazyStore(Path(run_dir) / rel, int(entry["keys"]), entry.get("columns"))

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name!r}: {len(store):,} keys" for name, store in self.items())
        return f"<state {{{sizes}}}, read when used>"
