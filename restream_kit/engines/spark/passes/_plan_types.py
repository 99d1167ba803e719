"""The records of the pass plan: :class:`Pass`, :class:`Probe`, :class:`PassPlan`.

``passes._plan`` says how a program's stages become passes and builds them
(``passes._plan_build``); these are the frozen records every other pass module reads.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Probe", "Pass", "PassPlan", "ORDER", "SINGLE", "BY_KEY", "UNFUSED_RUN", "LAZY_RUN"]

#: Partitioning of a pass with no key: by the log's order (stateless) or one task (sequential).
ORDER = "<order>"
SINGLE = "<single>"
#: A fold pass with no reads to serve: partitioned by the state's own key.
BY_KEY = "<key>"


@dataclass(frozen=True)
class Probe:
    """A read of ``state`` under ``key`` by handler number ``handler``, served by its home."""

    slot: int
    state: str
    key: str
    handler: int
    kinds: tuple[str, ...]
    home: int  # pass that serves it
    reader: int  # pass that consumes it


@dataclass(frozen=True)
class Pass:
    """One Spark job: a stage's handlers over its events, partitioned by ``partition``.

    A pass with no handlers *folds* a state: it receives every write of it and serves the
    reads of later stages under one key (``stage`` then names the state and the key).
    """

    index: int
    stage: str
    mode: str
    partition: str  # a key expression over ``e``, ORDER, SINGLE or BY_KEY
    handlers: tuple[int, ...]  # declaration numbers, in order
    kinds: tuple[str, ...]
    homes: tuple[str, ...]  # states whose complete values live here
    reason: str | None = None  # why a sequential pass is one task
    serves: tuple[Probe, ...] = ()
    consumes: tuple[Probe, ...] = ()
    blind: dict[str, tuple[int, ...]] = field(default_factory=dict)  # written here, held there
    feeds: dict[str, tuple[int, ...]] = field(default_factory=dict)  # held here, folded there too
    finals: tuple[str, ...] = ()  # states whose final values this pass reports
    probe_kinds: tuple[str, ...] = ()  # kinds of events that only come for probes
    stages: tuple[str, ...] = ()  # the plan's stages it runs (a reader may join its source)
    sends: dict[int, str] = field(default_factory=dict)  # later pass -> "probes"/"writes"
    schedules: tuple[str, ...] = ()  # kinds its handlers schedule
    copies: tuple[str, ...] = ()  # upstream states every partition holds whole (broadcast)
    versions_to: tuple[int, ...] = ()  # a fold: the passes it sends its state's versions to
    # Partitioned by a key read from an upstream state (``passes._lookup_stages``): that state, the
    # key it is read by, and the probe slots whose values (in handler order) partition it.
    lookup: tuple = ()
    # Partitioned by an element of its states' keys (``e.key`` of ``(e.key, e.start)``): the
    # position of that element in each such state's keys, so that a write of the state sent
    # here (or a start's value of it) goes to the partition of the element, where the events
    # that read it are, not to the partition of the whole key.
    elements: dict[str, int] = field(default_factory=dict)
    windows: tuple[str, ...] = ()  # the windows whose state it holds (``_window_notes``)
    # Per window of ``windows``: (whether its tasks run it natively in the serial engine's
    # loop, how or why not), for the path (``_window_shapes.pass_windows``).
    window_notes: dict[str, tuple[bool, str]] = field(default_factory=dict)
    # Closing windows whose adds and closes all run here (``_window_shapes.fuse_closes``): in
    # any loop, native or not.
    closes: tuple[str, ...] = ()
    # Of ``closes``, the session windows the serial engine runs lazily (``_native_plan``):
    # where the tasks run them natively, they do too (``passes._plain``).
    lazy: tuple[str, ...] = ()
    # Closing windows keyed otherwise than their adding stage, whose adds come here as one
    # narrow row each (``passes._narrow``); of an adding pass: window -> the pass they go to.
    narrow: tuple[str, ...] = ()
    narrow_to: dict[str, int] = field(default_factory=dict)
    # Of such a close pass: window -> its key as its adding handler writes it (``e.ip``).
    narrow_keys: dict[str, str] = field(default_factory=dict)

    def partition_value(self, state: str, key: Any) -> Any:
        """The value of this pass's partition expression that ``state``'s key ``key`` has."""
        i = self.elements.get(state)
        if i is None or type(key) is not tuple or len(key) <= i:
            return key
        return key[i]

    @property
    def event_kinds(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.kinds, *self.probe_kinds)))

    def describe(
        self, partitions: int, fused: bool = True, lazy: Collection[str] | None = None
    ) -> str:
        """What ran, as the path says it, with each window it holds: run natively in the
        pass (fused) or as its expansion, and why. ``fused``: whether its tasks ran their
        windows natively (``_window_shapes.fuses_windows``: not in a checkpointed, guarded,
        recorded or started replay, nor outside the serial engine's loop). ``lazy``: the
        session windows its tasks said they ran lazily (None: the plan, before they run)."""
        said = self._describe(partitions)
        for name in self.windows:
            native, how = self.window_notes.get(name, (False, "Spark runs its expansion"))
            if native and not fused and name in self.narrow:
                native, how = False, UNNARROWED_RUN
            elif native and not fused and name in self.closes:
                how = how.replace("in the serial engine's loop", "as its expansion")
            elif native and not fused:
                native, how = False, UNFUSED_RUN
            elif native and name in self.lazy and lazy is None:
                how += f", run lazily where the serial engine is ({LAZY_RUN})"
            elif native and lazy is not None and name in lazy:
                how += f", run lazily ({LAZY_RUN})"
            said_as = ("narrow" if name in self.narrow else "fused") if native else "not fused"
            said += f"; window {name} {said_as}: {how}"
        return said

    def _describe(self, partitions: int) -> str:
        if self.partition == SINGLE:
            return f"sequential in one task: {self.reason or 'the plan says so'}"
        if self.partition == ORDER:
            said = f"parallel over {partitions} partitions (by log order)"
        elif self.partition == BY_KEY:
            said = f"parallel over {partitions} partitions (by state key)"
        else:
            said = f"parallel over {partitions} partitions by {self.partition}"
        if self.lookup:
            said += f", its events and the value of {self.partition} from where {self.lookup[0]} is held"
        if self.copies:
            said += f", {' and '.join(self.copies)} copied whole to each"
        return said


@dataclass(frozen=True)
class PassPlan:
    passes: tuple[Pass, ...]
    kind_passes: dict[str, tuple[int, ...]]  # kind -> passes with handlers for it
    reason: str | None = None  # why the program runs as one sequential pass
    schedules: bool = True  # whether any handler schedules events
    # Closing windows whose closes run in a pass of their own: why not in their adding
    # stage's pass (``_window_shapes.fuse_closes``).
    unfused: dict[str, str] = field(default_factory=dict)


UNNARROWED_RUN = (
    "its closes as scheduled events in this pass, its adds sent here as writes, as the "
    "serial engine runs its expansion in a checkpointed, guarded, recorded or started replay"
)
#: How a session window the serial engine runs lazily runs in a pass holding it whole.
LAZY_RUN = "its sessions close at their keys' next adds, their rows made in close order at the end"
UNFUSED_RUN = (
    "its expansion, as the serial engine runs it in a checkpointed, guarded, recorded or "
    "started replay, or outside the serial engine's loop"
)
