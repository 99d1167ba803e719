"""What the workbench keeps of a notebook cell: a run, its baseline and diff (:class:`CellRun`,
:class:`Baseline`), a ``--sweep`` cell's variants and baseline (:class:`CellSweep`), and the
one line that says what a ``--baseline`` cell's replay reused (:func:`reuse_line`). Plain
data, no UI: ``widgets/`` draws it; ``restream_kit.workbench`` makes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from ..io.catalog import RunRecord
from ..io.compare import Diff, KeyDiff, diff
from ..io.log import Log
from ..io.progress import Cancelled, CancelToken, Observer, ProgressState
from ..io.result import Result
from ..model.program import Program

__all__ = [
    "Baseline",
    "CELL_BATCH",
    "CellOptions",
    "RunOptions",
    "CellRun",
    "CellSweep",
    "reuse_line",
    "no_reuse",
    "named_reuse",
]

#: Events per batch of a cell's serial replays: the serial engine looks at the cancel token
#: between batches, so that an interrupt stops a slow rule's replay within a second or so
#: (the engine's own 65,536 take a rule at 100 microseconds an event 6 s).
CELL_BATCH = 4096


Options = TypeVar("Options", bound="CellOptions")


@dataclass(frozen=True)
class CellOptions:
    """How a cell replays, beside its name, program and log: the keywords ``Workbench.run``
    and ``Workbench.sweep`` share, built once by :meth:`of` as they enter the workbench."""

    engine: str = "serial"
    #: The cell whose serial run is the baseline; None: this program's own serial replay.
    baseline: str | None = None
    master: str | None = None
    epoch: int | str | None = None
    #: Compare with the baseline by these fields (a ``KeyDiff``) rather than row by row.
    by: str | list[str] | None = None
    observer: Observer | None = None
    cancel: CancelToken | None = None
    #: Called with the cell once its baseline is ready.
    before_replay: Callable[[Any], None] | None = None
    progress: ProgressState | None = None

    @classmethod
    def of(cls: type[Options], given: Mapping[str, Any], where: str) -> Options:
        """The options of the keywords ``given`` to ``where``; a keyword it does not take is
        the ``TypeError`` Python raises for a function's."""
        names = {f.name for f in fields(cls)}
        for name in given:
            if name not in names:
                raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
        return cls(**given)


@dataclass(frozen=True)
class RunOptions(CellOptions):
    """A run's options (``Workbench.run``): a cell's, and how it replays and compares."""

    on_error: str = "stop"
    #: Re-run only the stages changed since a named baseline (False: always in full).
    reuse: bool = True
    checkpoint: str | None = None
    checkpoint_every: str | None = None
    #: True: always compared with a serial replay; False: never; None: under the limit.
    compare: bool | None = None
    compare_limit: int | None = None


#: How ``replay_reusing`` names a reused run given as a ``Result`` (replaced by the cell's name).
_GIVEN = "the given result"


@dataclass
class Baseline:
    """What a run is compared with, and where it came from."""

    label: str
    result: Result
    reused: bool
    record: RunRecord | None = None
    #: The oracle's replay of the run's own program (not of another cell's): a difference
    #: from it is an engine's error, never a change of the program's.
    same_program: bool = False


def no_reuse(baseline: str, why: str) -> dict[str, Any]:
    """``CellRun.reuse`` when the workbench found nothing to reuse before replaying."""
    return {
        "reused_run": baseline,
        "reused_stages": [],
        "rerun_stages": [],
        "saved_s": 0.0,
        "reuse_reason": f"nothing reused from {baseline}: {why}",
        "rerun_as": None,
        "notes": [],
    }


def named_reuse(info: dict[str, Any], baseline: str) -> dict[str, Any]:
    """``Result.reuse`` with the baseline cell's name for the reused run."""
    info = dict(info)
    info["reused_run"] = baseline
    if info.get("reuse_reason"):
        info["reuse_reason"] = info["reuse_reason"].replace(_GIVEN, baseline, 1)
    return info


def reuse_line(info: dict[str, Any] | None) -> str | None:
    """``reused 3 stages of v1 (befriend, ...); re-ran 1 (flag) as columns; saved 1.20 s``,
    or the one line saying why nothing was reused; None when reuse was not tried."""
    if not info:
        return None
    if info.get("reuse_reason"):
        return f"{info['reuse_reason']}; replayed in full"
    reused, rerun = info["reused_stages"], info["rerun_stages"]
    how = f" as {info['rerun_as']}" if info.get("rerun_as") else ""
    return (
        f"reused {len(reused)} stage(s) of {info['reused_run']} ({', '.join(reused)}); "
        f"re-ran {len(rerun)} ({', '.join(rerun) or 'none'}){how}; "
        f"saved {info.get('saved_s', 0.0):.2f} s"
    )


def cancelled_line(progress: ProgressState) -> str:
    """``cancelled at epoch k of n, N events`` from a replay's progress."""
    total = max(progress.epochs_total, 1)
    epoch = min(progress.epochs_done + 1, total)
    return f"cancelled at epoch {epoch} of {total}, {progress.events_done:,} events"


class CellOutcome:
    """How a cell's run ended, from its ``error`` and what it made (``_made()``): the same for
    a replay cell and a sweep cell."""

    error: BaseException | None
    progress: ProgressState

    def _made(self) -> Any:
        raise NotImplementedError

    @property
    def ok(self) -> bool:
        return self.error is None and self._made() is not None

    @property
    def cancelled(self) -> bool:
        return isinstance(self.error, (Cancelled, KeyboardInterrupt))

    @property
    def status(self) -> str:
        """``ok``, ``failed``, ``cancelled`` or ``running``."""
        if self.cancelled:
            return "cancelled"
        if self.error is not None:
            return "failed"
        return "ok" if self._made() is not None else "running"

    def cancelled_line(self) -> str:
        """``cancelled at epoch k of n, N events``: where a cancelled run stopped."""
        return cancelled_line(self.progress)


@dataclass
class CellRun(CellOutcome):
    """One run of a named program: its result, its baseline and the diff between them."""

    name: str
    program: Program
    log: Log
    engine: str
    result: Result | None = None
    baseline: Baseline | None = None
    diff: Diff | KeyDiff | None = None
    record: RunRecord | None = None
    error: BaseException | None = None
    params: dict[str, Any] = field(default_factory=dict)
    #: The replay's progress as the monitor saw it (epochs and events done, elapsed time).
    progress: ProgressState = field(default_factory=ProgressState, repr=False)
    #: Why the result was not compared with a serial replay (its log above the compare
    #: limit); None when it was, or will be.
    not_compared: str | None = None
    #: The phases the cell went through, each with when it began (seconds from the start).
    phases: list[tuple[str, float]] = field(default_factory=list, repr=False)
    #: Seconds from the cell's start to its end: what its user waited.
    wall_s: float = 0.0
    #: With a named baseline: what the replay reused of it (``Result.reuse``, the baseline's
    #: name as ``reused_run``), or why it reused nothing (``reuse_reason``); None without one.
    reuse: dict[str, Any] | None = None

    def _made(self) -> Any:
        return self.result

    def reuse_line(self) -> str | None:
        """One line on what the replay reused of its baseline, or why it reused nothing."""
        return reuse_line(self.reuse)

    def __repr__(self) -> str:
        what = f"<restream run {self.name!r} on {self.engine}: {self.status}"
        if self.result is not None:
            m = self.result.metrics
            tables = ", ".join(f"{n} {rows:,} rows" for n, rows in m.rows.items())
            what += f", {m.events:,} events in {m.wall_s:.2f} s" + (f"; {tables}" if tables else "")
        elif self.error is not None and not self.cancelled:
            what += f": {str(self.error).splitlines()[0] if str(self.error) else type(self.error).__name__}"
        elif self.cancelled:
            what += f" ({self.cancelled_line()})"
        return what + ">"

    def wait(self, timeout: float | None = None) -> CellRun:
        """A finished run is its own result (the same call as on a ``BackgroundRun``)."""
        return self

    @property
    def unexpected_difference(self) -> bool:
        """True when the baseline is the serial replay of this program and the outputs differ."""
        return bool(
            self.baseline and self.baseline.same_program and self.diff and not self.diff.empty
        )


@dataclass
class CellSweep(CellOutcome):
    """One ``%%restream NAME --sweep ...`` run: every variant's result and its baseline.

    ``variants`` are in grid order; ``diff(i)`` compares variant ``i`` (an index or a dict of
    parameter values) with the baseline; ``rows()`` is the table of rows per output table.
    """

    name: str
    program: Program
    log: Log
    engine: str
    values: dict[str, list[Any]]
    sweep: Any = None  # restream_kit.iterate.sweeps.Sweep
    baseline: Baseline | None = None
    error: BaseException | None = None
    by: str | list[str] | None = None
    progress: ProgressState = field(default_factory=ProgressState, repr=False)
    _diffs: dict[int, Diff | KeyDiff] = field(default_factory=dict, repr=False)

    def _made(self) -> Any:
        return self.sweep

    def wait(self, timeout: float | None = None) -> CellSweep:
        return self

    @property
    def result(self) -> Result | None:
        """The first variant's result (``variant(...)`` picks another)."""
        return self.sweep[0].result if self.sweep is not None and len(self.sweep) else None

    @property
    def varying(self) -> list[str]:
        """The parameters given more than one value, in the order given."""
        return [k for k, v in self.values.items() if len(v) > 1]

    @property
    def variants(self) -> list[Any]:
        return list(self.sweep) if self.sweep is not None else []

    def index(self, which: int | dict[str, Any]) -> int:
        """The position of a variant given by index or by (some of) its parameter values."""
        if isinstance(which, int):
            if not 0 <= which < len(self.variants):
                raise IndexError(f"{self.name} has {len(self.variants)} variants, not {which + 1}")
            return which
        for i, v in enumerate(self.variants):
            if all(v.params.get(k) == x for k, x in which.items()):
                return i
        raise KeyError(f"{self.name} has no variant with {which}")

    def variant(self, which: int | dict[str, Any]) -> Any:
        return self.variants[self.index(which)]

    def diff(self, which: int | dict[str, Any]) -> Diff | KeyDiff:
        """Variant ``which`` compared with the baseline (by ``by``'s fields when given)."""
        i = self.index(which)
        if i not in self._diffs:
            ours, theirs = self.variants[i].result, self.baseline.result
            label = f"{self.name}[{self.variants[i].label}]"
            self._diffs[i] = (
                diff(ours, theirs, by=self.by, labels=(label, self.baseline.label))
                if self.by
                else diff(ours, theirs)
            )
        return self._diffs[i]

    def rows(self):
        """A polars frame: a row per variant, its parameter values and rows per output table."""
        return self.sweep.rows()

    def __repr__(self) -> str:
        what = f"<restream sweep {self.name!r} on {self.engine}: {self.status}"
        if self.sweep is not None:
            how = "one scan" if self.sweep.single_scan else "separate replays"
            what += f", {len(self.sweep)} variants in {self.sweep.wall_s:.2f} s ({how})"
        elif self.error is not None and not self.cancelled:
            what += f": {str(self.error).splitlines()[0] if str(self.error) else type(self.error).__name__}"
        return what + ">"
