"""The planner: how parallel a program can run, read from its source and measured on a log.

``plan(program)`` reads the handlers (``_analysis``), checks that they are deterministic
(``_lint``), and builds the :class:`~restream_kit.planner.ir.Plan`: the dependency graph,
stages in topological order with their modes and partition keys, the static critical path.
``plan(program, log)`` adds the data critical path (``critical_path``): hot keys, each
stage's heaviest chain and the predicted speedup. ``causal.longest_chain`` replays a log and
measures the true longest read-after-write chain, against which the plan can be checked.

``checks`` checks a program against a log before anything runs (``rk.check_against_log``);
``ir`` holds the plan's frozen records (:class:`Plan`, :class:`StateInfo`, ...), which the
engines and views read.

May import: the program model, the compiler, the runtime and I/O (``restream_kit.model``,
``compiler``, ``runtime``, ``io``). Never ``history``, the engines (the planner sits below
them: engines read plans), ``api``, ``iterate``, ``cli``, ``workbench``, the notebook layer
or ``pyspark``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..io.log import Log
from ..model.errors import ProgramError
from ..model.program import Program
from . import ir
from ._analysis import analyse
from ._build import build_plan
from ._lint import Finding, lint
from ._module_info import ModuleInfo
from .checks import check_against_log, check_program
from .critical_path import SAMPLE_EVENTS, with_data
from .ir import *  # noqa: F403 (the plan's records, listed in ir once)
from .ir import Plan, PlanWarning

__all__ = ["plan", *ir.__all__]


def plan(
    program: Program | str | Path,
    log: Log | Any = None,
    *,
    ts: str | None = None,
    kind: str | None = None,
    require_kinds: bool = False,
    allow_nondeterminism: bool = False,
    sample_events: int = SAMPLE_EVENTS,
) -> Plan:
    """Plan ``program``; with ``log``, also its data critical path on that log.

    With ``log``, the program is first checked against it (``restream_kit.planner.checks``): a field
    no event has or a read of undeclared state raises
    :class:`~restream_kit.model.errors.CheckError`, a kind the log lacks becomes a warning
    (with ``require_kinds``, a CheckError when a handler would never run).

    ``ts`` and ``kind`` read ``log`` as ``Log(log, ts=..., kind=...)`` does.

    Raises :class:`~restream_kit.model.errors.ProgramError` naming the line when a handler is not
    deterministic (unless ``allow_nondeterminism``: then the findings become warnings) or
    calls a helper whose accesses to state cannot be followed.
    """
    program = Program.load(program)
    # Mistakes the log (or the declarations alone) reveal, before any analysis of keys.
    if log is not None:
        log = Log.of(log, ts, kind)
        checked = check_against_log(program, log, require_kinds=require_kinds)
    else:
        checked = check_program(program)
    mod = ModuleInfo(program)
    analysed, reached = analyse(program, mod)
    findings = lint(mod, reached)
    errors = [f for f in findings if f.error]
    if errors and not allow_nondeterminism:
        raise _rejection(program, errors)
    warnings = [_warning(f) for f in findings]
    for h in analysed:
        warnings.extend(PlanWarning(code, message, h.name, line) for code, message, line in h.notes)
    warnings.extend(PlanWarning(f.code, f.message, f.handler, f.lineno) for f in checked)
    result = build_plan(program, analysed, warnings)
    if log is not None:
        result = with_data(result, program, log, sample_events=sample_events)
    return result


def _where(f: Finding) -> str:
    return f"handler {f.handler!r}" + (f" (in helper {f.via!r})" if f.via else "")


def _warning(f: Finding) -> PlanWarning:
    return PlanWarning(f.code, f"{_where(f)} {f.message}", f.handler, f.lineno)


def _rejection(program: Program, errors: list[Finding]) -> ProgramError:
    first = errors[0]
    more = ""
    if len(errors) > 1:
        lines = ", ".join(str(f.lineno) for f in errors[1:6])
        more = f" (also on line{'s' if len(errors) > 2 else ''} {lines}{', ...' if len(errors) > 6 else ''})"
    return ProgramError(
        f"{_where(first)} {first.message}{more}; handlers must be deterministic "
        "(pass allow_nondeterminism=True to plan anyway)",
        filename=program.filename,
        lineno=first.lineno,
    )
