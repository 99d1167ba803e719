"""Parameter sweeps: every variant of a grid of parameter values in one scan of the log.

``sweep(program, log, ratio=[1.5, 2, 3], share=[0.1, 0.2])`` rewrites the program into one
*sweep program* in which the handlers no swept parameter can affect run once and every other
handler runs once per variant, on its own copy of the state it writes (the variant is part of
the state's name, so of every key). The ordinary engine replays that program; its result is
split into one :class:`~restream_kit.io.result.Result` per variant. ``docs/iterate.md`` says
which handlers are shared and why each variant equals its own replay.
"""

from __future__ import annotations

import ast
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engines import capabilities_of, get_engine
from ..io.log import Log
from ..io.result import Metrics, Result
from ..model.errors import ProgramError
from ..model.params import check_values, with_params
from ..model.program import Program
from ._sweep_program import (
    COPY,
    TABLE,
    SweepProgram,
    astuple_rest,
    partition,
    same_shape_dump,
    scheduling,
    sweep_program,
)

__all__ = ["sweep", "Sweep", "Variant", "SweepProgram", "sweep_program", "grid", "parse_grid"]


@dataclass
class Variant:
    """One variant of a sweep: its parameter values and its result."""

    params: dict[str, Any]
    result: Result

    @property
    def label(self) -> str:
        """``ratio=1.5,share=0.1``: also the variant's folder name under ``--out``."""
        return ",".join(f"{k}={v}" for k, v in self.params.items())

    def to_dict(self) -> dict[str, Any]:
        return {"params": dict(self.params), "tables": dict(self.result.metrics.rows)}


@dataclass
class Sweep:
    """A sweep's variants (in grid order) and how it ran.

    ``single_scan`` is True when every variant ran in one replay of the sweep program;
    ``shared_handlers`` ran once for all variants, ``variant_handlers`` once per variant.
    """

    variants: list[Variant]
    events: int
    wall_s: float
    engine: str
    single_scan: bool
    shared_handlers: tuple[str, ...]
    variant_handlers: tuple[str, ...]
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.variants)

    def __iter__(self):
        return iter(self.variants)

    def __getitem__(self, index: int) -> Variant:
        return self.variants[index]

    def result(self, **params: Any) -> Result:
        """The result of the variant with these parameter values."""
        for v in self.variants:
            if all(v.params.get(k) == x for k, x in params.items()):
                return v.result
        raise KeyError(f"no variant with {params}")

    def rows(self):
        """A polars frame: one row per variant, its parameters and rows per output table."""
        import polars as pl

        tables = sorted({t for v in self.variants for t in v.result.table_names})
        return pl.DataFrame(
            [
                {**v.params, **{t: v.result.metrics.rows.get(t, 0) for t in tables}}
                for v in self.variants
            ]
        )

    def summary(self) -> dict[str, Any]:
        return {
            "variants": [v.to_dict() for v in self.variants],
            "events": self.events,
            "wall_s": self.wall_s,
            "engine": self.engine,
            "single_scan": self.single_scan,
            "shared_handlers": list(self.shared_handlers),
            "variant_handlers": list(self.variant_handlers),
            "warnings": list(self.warnings),
        }

    def write(self, out: str | Path) -> dict[str, dict[str, str]]:
        """Write each variant's tables under ``out/<label>/``; return the paths by variant."""
        return {v.label: v.result.write(Path(out) / v.label) for v in self.variants}

    def __repr__(self) -> str:
        how = "one scan" if self.single_scan else "separate replays"
        return f"Sweep({len(self.variants)} variants, {how}, {self.wall_s:.2f} s)"


def grid(values: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of ``values`` (a parameter name to its list of values), in order."""
    names = list(values)
    for name in names:
        if isinstance(values[name], (str, bytes)) or not isinstance(values[name], Sequence):
            raise ProgramError(f"sweep: give a list of values for {name!r}, not {values[name]!r}")
        if not values[name]:
            raise ProgramError(f"sweep: {name!r} has no value to try")
    return [dict(zip(names, combo)) for combo in itertools.product(*(values[n] for n in names))]


def parse_grid(items: Sequence[str], option: str = "--param") -> dict[str, list[Any]]:
    """``["ratio=1.5,2,3", "share=0.1"]`` (command line or magic options) as the values of
    a grid: ``{"ratio": [1.5, 2, 3], "share": [0.1]}``."""
    from ..model.params import parse_value

    out: dict[str, list[Any]] = {}
    for item in items:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name or not text.strip():
            raise ProgramError(f"{option} {item!r}: expected NAME=V1,V2,...")
        if name in out:
            raise ProgramError(f"{option} {name} is given twice")
        out[name] = [parse_value(v) for v in text.split(",")]
    return out


def sweep(
    program: Program | str | Path,
    log: Log | Any,
    *,
    engine: str = "serial",
    params: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    ts: str | None = None,
    kind: str | None = None,
    require_kinds: bool = True,
    **values: Sequence[Any],
) -> Sweep:
    """Replay every combination of the parameter values given (a grid), in one scan.

    ``sweep(program, log, ratio=[1.5, 2, 3], share=[0.1, 0.2])`` gives 6 variants; each
    variant's result equals ``replay(program, log, params={...})``. ``params`` fixes other
    parameters for every variant; ``ts`` and ``kind`` read ``log`` as ``Log(log, ts=...,
    kind=...)`` does; a handler the log never feeds is an error, as in ``replay`` (which
    ``require_kinds=False`` makes a warning); ``options`` go to
    the engine (``{"master": "local[2]"}``), apart from the values, whose names are the
    program's. When a handler that varies schedules events, the variants run as separate
    replays (``Sweep.single_scan`` False, and a warning says why).
    """
    from ..api import check_against_log, replay, warn_findings
    from ..io.emits import emit_schemas

    program = Program.load(program)
    if params:
        program = with_params(program, params)
    log = Log.of(log, ts, kind)
    variants = grid(values)
    for v in variants:
        check_values(program, v, "sweep")
    notes = warn_findings(check_against_log(program, log, require_kinds=require_kinds))
    variant, states, _out = partition(program, list(values))
    schedulers = scheduling(program, variant)
    # Spark workers rebuild a program from its source text: the sweep program must have its
    # own, and windows would be expanded twice from it.
    from_source = capabilities_of(get_engine(engine)).from_source
    windows = from_source and same_shape_dump(ast.parse(program.source)) != same_shape_dump(
        program.module_ast
    )
    if schedulers or windows or not variants:
        how = (engine, options, schedulers, windows)
        return _separately(program, log, variants, variant, how, notes)
    started = time.perf_counter()
    rewritten = sweep_program(program, variants)
    if from_source:
        text = ast.unparse(rewritten.program.module_ast) + "\n"
        sweep_prog = Program(text, f"{program.filename} [sweep]", program.name)
        rewritten = SweepProgram(sweep_prog, *astuple_rest(rewritten))
    combined = replay(rewritten.program, log, engine=engine, check=False, **(options or {}))
    wall = time.perf_counter() - started
    schemas = emit_schemas(program, log)
    out = [Variant(v, _split(combined, i, states, schemas, notes)) for i, v in enumerate(variants)]
    if from_source:
        notes.append(
            f"the {engine} engine replayed one program holding every variant (one plan, one "
            "scan of the log; each variant's handlers are stages of their own); an error in a "
            "variant's handler names a line of the generated sweep program"
        )
    return Sweep(
        out,
        len(log),
        wall,
        engine,
        True,
        rewritten.shared_handlers,
        rewritten.variant_handlers,
        notes,
    )


def _split(combined: Result, i: int, states: set[str], schemas: dict, notes: list[str]) -> Result:
    """Variant ``i``'s result from the sweep program's result."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table_suffix, name_suffix = TABLE.format(i), COPY.format(i)
    tables = {}
    for name, table in combined.tables.items():
        if "@variant" not in name:
            tables[name] = table
        elif name.endswith(table_suffix):
            col = table.schema.get_field_index("handler")
            handler = pc.replace_substring_regex(table.column(col), f"{name_suffix}$", "")
            table = table.set_column(col, "handler", handler.cast(pa.string()))
            tables[name[: -len(table_suffix)]] = table
    state = {}
    for name, values in combined.state.items():
        base, sep, index = name.rpartition("__v")
        if sep and base in states:
            if index == str(i):
                state[base] = values
        else:
            state[name] = values
    m = combined.metrics
    metrics = Metrics(
        engine=m.engine,
        events=m.events,
        scheduled_events=m.scheduled_events,
        wall_s=m.wall_s,
        span_ms=m.span_ms,
        rows={name: t.num_rows for name, t in tables.items()},
        epochs=m.epochs,
        path=dict(m.path),
    )
    return Result(
        tables=tables, state=state, metrics=metrics, warnings=list(notes), schemas=schemas
    )


def _separately(
    program: Program,
    log: Log,
    variants: list[dict[str, Any]],
    variant: set[str],
    how: tuple[str, Mapping[str, Any] | None, list[str], bool],
    notes: list[str],
) -> Sweep:
    """Every variant as a replay of its own: where one scan cannot hold them all (a varying
    handler schedules events, or the engine rebuilds a program with windows from its text)."""
    from ..api import replay

    engine, options, schedulers, windows = how
    started = time.perf_counter()
    results = [
        replay(program, log, engine=engine, params=v, check=False, **(options or {}))
        for v in variants
    ]
    if windows and not schedulers:
        notes.append(
            f"the variants ran as {len(variants)} separate replays on {engine}: a sweep "
            "of a program with window declarations runs in one scan on the serial engine only"
        )
    if schedulers:
        notes.append(
            f"the variants ran as {len(variants)} separate replays: handler "
            f"{schedulers[0]!r} varies with the parameters and schedules events, whose "
            "numbering a single scan would share between variants"
        )
    wall = time.perf_counter() - started
    return Sweep(
        [Variant(v, r) for v, r in zip(variants, results)],
        len(log),
        wall,
        engine,
        False,
        tuple(h.name for h in program.handlers if h.name not in variant),
        tuple(h.name for h in program.handlers if h.name in variant),
        notes,
    )
