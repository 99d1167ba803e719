"""A run's history: what each stage read of the state other stages wrote, event by event.

A serial replay asked for it (``replay(..., history=True)``) records, for every read site of
one stage on another stage's state (:mod:`restream_kit.history.probes`), the value the read finds,
at the reading handler's place, for every event of the handler's kinds: a statement the
generated loop runs (a dict lookup and a list append), not a Python call per write. A
re-replay that re-runs the reading stage then gets its upstream values as columns aligned
with its events: no join, no replay of the stages upstream.

Stored under the run's directory in the catalog as ``history/probes/NNNN.parquet`` (columns
``value`` and ``absent``) next to ``history/history.json`` (the log's fingerprint, each
stage's identity and handlers, each state's writers, each probe's signature and the encoding
of its values). Values of one plain type (int, float, str, bool) are stored as that Arrow
type; others as the typed columns a run's state is stored as (:mod:`restream_kit.io._columns`:
structs for tuples, lists for lists and sets, a tag per value when kinds mix, JSON text only
for values Arrow cannot type), encoding ``columns:`` and the column's spec. No pickles.
Histories of format 3 (values that are not plain as codec JSON text, ``codec``) are still
read. The rows a stage emitted are the run's own tables (every row names its handler);
the final state is the run's own.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..io import _columns as columns
from ..io._parquet import read_parquet
from ..io.catalog import HISTORY_DIR
from ..model import values
from ..model.errors import RestreamError
from .probes import ABSENT, ReadSites, Signature, hook_source, signature

__all__ = [
    "Recorder",
    "History",
    "RecordedProbe",
    "HISTORY_DIR",
    "encode_probe",
    "decode_column",
    "codec_text",
    "timing_reason",
    "schedulers",
    "probe_sites",
    "recorded_sites",
]

_INDEX = "history.json"
_FORMAT = 4
_READS = (3, 4)
#: The encoding of a probe stored as :mod:`restream_kit.io._columns` columns (then its spec).
COLUMNS = "columns:"

_ARROW_TYPES = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}
_ABSENT_TYPE = type(ABSENT)


class RecordedProbe:
    """The values a history recorded at one read site, one per event that ran it: ``value``
    (encoded as ``encoding``: an Arrow type name or ``codec``) and ``absent`` (True where the
    store had no value; None: nowhere).

    A probe of a stored history (:meth:`stored`) reads its file the first time its values are
    used: a re-replay reads only the probes that serve its re-run handlers."""

    __hash__ = None  # mutable, compared by value

    def __init__(
        self,
        signature: Signature,
        value: pa.Array | None,
        encoding: str,
        absent: pa.Array | None = None,
        file: Path | None = None,
    ):
        self.signature = signature
        self.encoding = encoding
        #: The file of a stored history that holds exactly these values (format ``_FORMAT``):
        #: writing the probe again links it rather than encoding it again.
        self.file = file
        self._values: tuple[pa.Array, pa.Array | None] | None = (value, absent)
        self._source: Path | None = None

    @classmethod
    def stored(
        cls, signature: Signature, encoding: str, source: Path, file: Path | None
    ) -> RecordedProbe:
        """The probe whose values are in the Parquet file ``source``, read when first used."""
        probe = cls(signature, None, encoding, None, file)
        probe._values, probe._source = None, Path(source)
        return probe

    @property
    def value(self) -> pa.Array:
        return self._read()[0]

    @property
    def absent(self) -> pa.Array | None:
        return self._read()[1]

    def _read(self) -> tuple[pa.Array, pa.Array | None]:
        if self._values is None:
            try:
                table = read_parquet(self._source)
            except (OSError, pa.ArrowException) as exc:
                raise RestreamError(
                    f"the history file {self._source} cannot be read (its run forgotten "
                    f"meanwhile?): {exc}"
                ) from None
            absent = table.column("absent") if "absent" in table.column_names else None
            self._values = (
                _one_array(table.column("value")),
                None if absent is None else _one_array(absent),
            )
        return self._values

    def with_file(self, file: Path) -> RecordedProbe:
        """This probe, tied to ``file`` (see :attr:`file`)."""
        probe = copy.copy(self)
        probe.file = file
        return probe

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RecordedProbe):
            return NotImplemented
        return (
            (self.signature, self.encoding) == (other.signature, other.encoding)
            and self.value.equals(other.value)
            and (self.absent is None) == (other.absent is None)
            and (self.absent is None or self.absent.equals(other.absent))
        )

    def __repr__(self) -> str:
        return f"RecordedProbe({self.signature!r}, encoding={self.encoding!r})"

    def python_values(self) -> list:
        """The values as Python objects, :data:`ABSENT` where the store had none."""
        if self.encoding.startswith(COLUMNS):
            out = columns.decode_column(self.value, json.loads(self.encoding[len(COLUMNS) :]))
        else:
            out = decode_column(self.value.to_pylist(), self.encoding)
        if self.absent is not None:
            for i in pc.indices_nonzero(self.absent).to_pylist():
                out[i] = ABSENT
        return out


def _one_array(column: pa.ChunkedArray) -> pa.Array:
    """``column`` as one array: its chunk if it has one (no copy), else its chunks joined."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def probe_sites(program: Any, plan: Any, columns: list[str]) -> list:
    """The read sites a history of ``program`` records: in each handler, reads of state that
    some handler writes but none of the handler's own stage does."""
    from ..compiler.compile import _rewrite

    stage_of = {h: s.name for s in plan.stages for h in s.handlers}
    writers: dict[str, set[str]] = {}
    for h in plan.handlers:
        for a in h.writes:
            writers.setdefault(a.state, set()).add(stage_of[h.name])
    wanted = {
        h.name: {s for s, stages in writers.items() if stage_of[h.name] not in stages}
        for h in program.handlers
        if h.event_arg
    }
    finder = ReadSites(program, wanted, columns)
    finder(_rewrite(program))
    return finder.sites


def recorded_sites(
    program: Any, plan: Any, columns: Any, skip: Any = ()
) -> list[tuple[Signature, Any]]:
    """The probes a history of ``program`` records, in slot order: each signature once, with
    the first read site that has it (reads of the states in ``skip`` left out). Every engine
    that records a history records these, so that its probes are the same."""
    slots: dict[Signature, Any] = {}
    for site in probe_sites(program, plan, list(columns)):
        if site.state in skip:
            continue
        sig = signature(program, plan, site.handler, site.state, site.text)
        if sig not in slots:  # else recorded at an earlier handler's place: the same values
            slots[sig] = site
    return list(slots.items())


class Recorder:
    """The loop statements that record a replay's probes, and the :class:`History` they make."""

    def __init__(self, program: Any, columns: list[str], *, skip=(), plan: Any = None):
        """``skip``: states whose reads are not recorded (a re-replay takes them from RUN)."""
        from .. import planner

        self.plan = plan or planner.plan(program, allow_nondeterminism=True)
        self.signatures: list[Signature] = []
        self.values: list[list] = []
        self.hooks: list[tuple[int, str, str]] = []
        self.globals: dict[str, Any] = {"_rs_ABSENT": ABSENT}
        index = {h.name: h for h in program.handlers}
        for slot, (sig, site) in enumerate(recorded_sites(program, self.plan, columns, skip)):
            self.signatures.append(sig)
            self.values.append([])
            self.globals[f"_rs_pv{slot}"] = self.values[slot].append
            handler = index[site.handler]
            for kind in handler.kinds:
                self.hooks.append((handler.index, kind, hook_source(site, slot, list(columns))))

    def finish(self, program: Any, log: Any, rt: Any, result: Any) -> History:
        """The history of the replay."""
        hist = History.new(program, log, self.plan)
        # The time of the last event that ran (log or scheduled): timed writes due by then
        # were applied, later ones never were. A re-replay ends its own timed writes there.
        hist.last_ts = rt.event[1] if rt.event is not None else None
        for sig, vals in zip(self.signatures, self.values, strict=True):
            hist.add_probe(sig, vals)
        return hist


def codec_text(value: Any) -> str:
    """``value`` through the value codec, as compact JSON text (equal values, equal text)."""
    return json.dumps(values.encode(value), separators=(",", ":"))


def encode_probe(items: list) -> tuple[pa.Array, str, pa.Array | None]:
    """A probe's values as (Arrow array, encoding, absent mask or None).

    Values of one plain Python type (by exact type: 1, 1.0 and True are kept apart) are
    stored as that type, anything else as typed columns (encoding ``columns:`` and their
    spec); :data:`ABSENT` is a null in ``value`` and True in ``absent``."""
    types = set(map(type, items))
    has_absent = _ABSENT_TYPE in types
    types.discard(_ABSENT_TYPE)
    if len(types) <= 1:
        t = next(iter(types), bool)
        arrow = _ARROW_TYPES.get(t)
        # ABSENT is a NaN float: as a null it is told apart unless floats may be NaN too.
        if arrow is not None and not (has_absent and t is float):
            try:
                arr = pa.array(items, arrow, from_pandas=True)
                absent = arr.is_null() if has_absent else None
                return arr, str(arrow), absent
            except (OverflowError, pa.ArrowException):
                pass
    mask = [type(x) is _ABSENT_TYPE for x in items] if has_absent else None
    present = [x for x in items if type(x) is not _ABSENT_TYPE] if has_absent else items
    kinds = set(map(type, present))
    if len(kinds) == 1 and (t := next(iter(kinds))) in _ARROW_TYPES:
        try:
            arr = pa.array([None if type(x) is _ABSENT_TYPE else x for x in items], _ARROW_TYPES[t])
            return arr, str(_ARROW_TYPES[t]), pa.array(mask, pa.bool_())
        except (OverflowError, pa.ArrowException):
            pass
    present = [None if type(x) is _ABSENT_TYPE else x for x in items] if has_absent else items
    array, spec = columns.encode_column(present)
    encoding = COLUMNS + json.dumps(spec, separators=(",", ":"))
    return array, encoding, None if mask is None else pa.array(mask, pa.bool_())


def decode_column(items: list, encoding: str) -> list:
    """Python values of a column of plain values or codec text (a format 3 history's),
    nulls staying None."""
    if encoding != "codec":
        return items
    return [None if x is None else values.decode(json.loads(x)) for x in items]


@dataclass
class History:
    """What a run's stages read of each other's state, and what the run's stages were."""

    log_fingerprint: str
    #: Stage name -> identity (``restream_kit.history.identity.stage_identities``).
    identities: dict[str, str]
    #: Stage name -> its handlers.
    stages: dict[str, list[str]]
    #: State -> the handlers that write it (as the planner sees the program).
    writers: dict[str, list[str]] = field(default_factory=dict)
    probes: dict[Signature, RecordedProbe] = field(default_factory=dict)
    #: Why this history cannot serve reads (None: it can).
    unusable: str | None = None
    #: Handler -> the kinds it schedules (``?``: a kind that is not a literal).
    schedulers: dict[str, list[str]] = field(default_factory=dict)
    #: The time of the last event the run ran (log or scheduled); None: no event ran.
    last_ts: int | None = None

    @classmethod
    def new(cls, program: Any, log: Any, plan: Any = None) -> History:
        """An empty history of a replay of ``program`` over ``log``."""
        from .. import planner
        from .identity import stage_identities

        plan = plan or planner.plan(program, allow_nondeterminism=True)
        writers: dict[str, list[str]] = {}
        for h in program.handlers:
            for a in plan.handler(h.name).writes:
                if h.name not in writers.setdefault(a.state, []):
                    writers[a.state].append(h.name)
        return cls(
            log_fingerprint=log.fingerprint,
            identities=stage_identities(program, plan),
            stages={s.name: list(s.handlers) for s in plan.stages},
            writers=writers,
            schedulers=schedulers(plan),
        )

    def add_probe(self, sig: Signature, items: list) -> None:
        """Add the recorded values of the read with signature ``sig``."""
        value, encoding, absent = encode_probe(items)
        self.probes[sig] = RecordedProbe(sig, value, encoding, absent)

    @property
    def nbytes(self) -> int:
        """Bytes the recorded values take in memory."""
        return sum(
            p.value.nbytes + (p.absent.nbytes if p.absent is not None else 0)
            for p in self.probes.values()
        )

    def write(self, run_dir: str | Path) -> None:
        """Write the history under ``run_dir/history/``."""
        out = Path(run_dir) / HISTORY_DIR
        (out / "probes").mkdir(parents=True, mode=0o700, exist_ok=True)
        probes = []
        for i, probe in enumerate(self.probes.values()):
            rel = f"probes/{i:04d}.parquet"
            if probe.file is None or not _linked(probe.file, out / rel):
                columns = {"value": probe.value}
                if probe.absent is not None:
                    columns["absent"] = probe.absent
                # One row group: read back as one chunk each, without a copy to join them.
                table = pa.table(columns)
                pq.write_table(table, out / rel, row_group_size=max(table.num_rows, 1))
            probes.append({**probe.signature.to_json(), "file": rel, "encoding": probe.encoding})
        index = {
            "format": _FORMAT,
            "log_fingerprint": self.log_fingerprint,
            "identities": self.identities,
            "stages": self.stages,
            "writers": self.writers,
            "probes": probes,
            "unusable": self.unusable,
            "schedulers": self.schedulers,
            "last_ts": self.last_ts,
        }
        (out / _INDEX).write_text(json.dumps(index, indent=1))

    @classmethod
    def read(cls, run_dir: str | Path) -> History | None:
        """The history stored under ``run_dir``, or None when the run kept none (or kept one
        in an older format)."""
        where = Path(run_dir) / HISTORY_DIR
        if not (where / _INDEX).exists():
            return None
        index = json.loads((where / _INDEX).read_text())
        if index.get("format") not in _READS:
            return None
        hist = cls(
            log_fingerprint=index["log_fingerprint"],
            identities=index["identities"],
            stages=index["stages"],
            writers=index["writers"],
            unusable=index.get("unusable"),
            schedulers=index.get("schedulers", {}),
            last_ts=index.get("last_ts"),
        )
        for info in index["probes"]:
            sig = Signature.from_json(info)
            source = where / info["file"]
            file = source if index["format"] == _FORMAT else None
            hist.probes[sig] = RecordedProbe.stored(sig, info["encoding"], source, file)
        return hist

    def recorded_at(self, run_dir: str | Path) -> History:
        """This history with each probe tied to the file :meth:`write` wrote it to under
        ``run_dir``, so that a history reusing the probe links that file; itself when
        ``run_dir`` holds no history of this format."""
        where = Path(run_dir) / HISTORY_DIR
        try:
            index = json.loads((where / _INDEX).read_text())
        except (OSError, ValueError):
            return self
        if index.get("format") != _FORMAT:
            return self
        files = {
            Signature.from_json(info): (where / info["file"], info["encoding"])
            for info in index["probes"]
        }
        probes = {}
        for sig, probe in self.probes.items():
            file, encoding = files.get(sig, (None, None))
            if probe.file is None and file is not None and encoding == probe.encoding:
                probe = probe.with_file(file)
            probes[sig] = probe
        return replace(self, probes=probes)


def _linked(src: Path, dst: Path) -> bool:
    """Whether ``dst`` is now a hard link to ``src`` (files of a run never change)."""
    try:
        os.link(src, dst)
    except OSError:  # gone (its run forgotten), or another file system: written instead
        return False
    return True


def schedulers(plan: Any) -> dict[str, list[str]]:
    """Handler -> the kinds it schedules (itself or through helpers), for those that do."""
    return {h.name: list(h.schedules) for h in plan.handlers if h.schedules}


def timing_reason(program: Any) -> str | None:
    """Whether ``program`` schedules events or writes with ``at=`` (None: neither), as a
    phrase. Such programs keep usable histories; a re-replay checks what it re-runs
    (:mod:`restream_kit.iterate.reuse`)."""
    import ast

    from ..planner.checks import scheduled_fields

    if scheduled_fields(program):
        return f"{program.name} schedules events (schedule(...) or a window)"
    for node in ast.walk(program.module_ast):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("set", "add", "merge", "delete")
            and any(kw.arg == "at" for kw in node.keywords)
        ):
            return f"{program.name} writes state with at= (line {node.lineno})"
    return None
