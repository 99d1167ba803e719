"""The checkpoint's on-disk codec: JSON with type tags and Arrow files, no pickle.

:func:`save_value` writes a value (a replay's state, an epoch's rows) as ``<stem>.json`` with
its Arrow tables beside it, :func:`load_value` reads it back; a value it cannot store is a
:class:`CheckpointError` naming the state and key that hold it. A function in the state is
stored as a :class:`ProgramFunction`: its name in the program, checked against the code.
"""

from __future__ import annotations

import hashlib
import os
import types
from dataclasses import dataclass
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

__all__ = [
    "CheckpointError",
    "ProgramFunction",
    "RowsFile",
    "load_value",
    "program_codes",
    "save_value",
]


class CheckpointError(RestreamError):
    """A checkpoint directory that cannot be used: not one, another replay's, or unreadable."""


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


@dataclass(frozen=True)
class RowsFile:
    """One table's rows of an epoch as the file that holds them, not read
    (``load_value(..., rows_files=True)``): ``lsn, ts, handler, seq, f:<field>..``."""

    path: Path


def load_value(directory: Path, stem: str, *, rows_files: bool = False) -> Any:
    """The value :func:`save_value` wrote (building only plain values, tables and events);
    with ``rows_files``, a table's rows kept as a file are that :class:`RowsFile`, unread."""
    path = directory / f"{stem}.json"

    def rows(name: Any) -> Any:
        if not rows_files:
            return built(name, rows_from_table)
        if not isinstance(name, str) or "/" in name or not name.endswith(".arrow"):
            raise values.ValueCodecError(f"bad Arrow file reference {name!r}")
        return RowsFile(directory / name)

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
        "rows": rows,
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


def program_codes(namespace: dict[str, Any], filename: str) -> dict[tuple, types.CodeType]:
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
