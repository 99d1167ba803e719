"""Layers point one way: program model and analysis <- engines <- API/CLI <- notebook UI.

Every module's imports are read from its source (``ast``, so imports inside functions count
too) and checked against :data:`RULES`, the one table of what a part of the code must not
import. The package docstrings (``restream_kit``, ``restream_kit.engines``,
``restream_kit.planner``, ``widgets``) say the same in words. A second test imports the core
and replays serially in a process where the notebook libraries and Spark cannot be imported.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

NOTEBOOK = ("widgets", "plotly", "ipywidgets", "anywidget")

#: The layers of ``restream_kit``, lowest first: (folder or file, its modules). A layer may
#: import the ones before it and never the ones after it; the last layer, the notebook, is the
#: top-level ``widgets`` package.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("restream_kit/model", ("restream_kit.model",)),
    ("restream_kit/compiler", ("restream_kit.compiler",)),
    ("restream_kit/runtime", ("restream_kit.runtime",)),
    ("restream_kit/io", ("restream_kit.io",)),
    ("restream_kit/planner", ("restream_kit.planner",)),
    ("restream_kit/history", ("restream_kit.history",)),
    ("restream_kit/engines", ("restream_kit.engines",)),
    ("restream_kit/api.py", ("restream_kit.api",)),
    ("restream_kit/iterate", ("restream_kit.iterate",)),
    ("restream_kit/workbench.py", ("restream_kit.workbench",)),
    ("restream_kit/cli", ("restream_kit.cli",)),
]
#: Layers that import each other (one level, several packages): the API and what it offers.
SAME_LEVEL = {"restream_kit/api.py", "restream_kit/iterate", "restream_kit/workbench.py"}


def _layer_rules() -> list[tuple[str, tuple[str, ...], str]]:
    rules = []
    for i, (who, _mine) in enumerate(LAYERS):
        above = [
            name
            for other, names in LAYERS[i + 1 :]
            if not (who in SAME_LEVEL and other in SAME_LEVEL)
            for name in names
        ]
        if above:
            rules.append((who, tuple(above), f"{who} must not import a layer above it"))
    return rules


#: (who, must not import, why). ``who`` is a folder or file under the repository root; a
#: forbidden name covers its submodules. The first matching rows all apply.
RULES: list[tuple[str, tuple[str, ...], str]] = [
    ("restream_kit", NOTEBOOK, "the core imports without the notebook layer"),
    ("restream_kit", ("pyspark",), "only the Spark engine imports Spark"),
    *_layer_rules(),
    ("widgets", ("pyspark",), "the notebook layer reaches Spark through the API"),
    *(
        (who, ("restream_kit.engines.spark",), "Spark's internals are reached through its engine")
        for who in (
            "restream_kit/api.py",
            "restream_kit/iterate",
            "restream_kit/workbench.py",
            "restream_kit/cli",
            "widgets",
        )
    ),
]

#: Where a rule does not hold yet: (file, forbidden import) -> why, and what removes it. A
#: row that no longer matches anything fails, so the list only shrinks.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("restream_kit/engines/spark", "pyspark"): "the Spark engine itself",
    ("restream_kit/model/program.py", "restream_kit.compiler"): (
        "loading a program compiles it: Program() expands its windows and checks its handlers "
        "with the compiler, lazily (the compiler imports the model, never the reverse at import)"
    ),
    ("restream_kit/__init__.py", "widgets"): (
        "load_ipython_extension, the hook of %load_ext restream_kit, imports the magics "
        "(widgets.magics) when IPython calls it, never on import restream_kit"
    ),
}


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """Every module ``path`` imports, absolute, with its line: ``from .x import y`` gives
    both ``pkg.x`` and ``pkg.x.y`` (``y`` may be a module)."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            found.append((node.lineno, stem))
            found += [(node.lineno, f"{stem}.{alias.name}") for alias in node.names]
    return found


def _covers(name: str, forbidden: str) -> bool:
    return name == forbidden or name.startswith(forbidden + ".")


def _under(rel: str, who: str) -> bool:
    return rel == who or rel.startswith(who + "/") or rel == who + ".py"


def violations(root: Path = ROOT) -> tuple[list[str], set[tuple[str, str]]]:
    """Imports that break a rule, as ``file:line: ...`` lines, and the exceptions used."""
    found, used = [], set()
    sources = sorted(p for d in ("restream_kit", "widgets") for p in (root / d).rglob("*.py"))
    for path in sources:
        rel = path.relative_to(root).as_posix()
        for who, forbidden, why in RULES:
            if not _under(rel, who):
                continue
            for lineno, name in imports_of(path, root):
                for bad in forbidden:
                    if not _covers(name, bad):
                        continue
                    excused = [key for key in EXCEPTIONS if _under(rel, key[0]) and key[1] == bad]
                    if excused:
                        used.update(excused)
                    else:
                        found.append(f"{rel}:{lineno}: imports {name} ({why})")
    return sorted(set(found)), used


def test_no_import_points_up_a_layer():
    found, _used = violations()
    assert not found, "imports against the layers:\n" + "\n".join(found)


def test_every_exception_is_still_needed():
    _found, used = violations()
    stale = set(EXCEPTIONS) - used
    assert not stale, f"exceptions that no import needs any more, delete them: {sorted(stale)}"


def test_the_rules_see_relative_and_lazy_imports(tmp_path):
    """The reader itself: an import inside a function, two levels up, is found."""
    source = tmp_path / "restream_kit" / "planner" / "_probe_for_test_layers.py"
    source.parent.mkdir(parents=True)
    source.write_text("def f():\n    from ..engines import serial\n    import plotly.express\n")
    found, _ = violations(tmp_path)
    assert found == [
        "restream_kit/planner/_probe_for_test_layers.py:2: imports restream_kit.engines "
        "(restream_kit/planner must not import a layer above it)",
        "restream_kit/planner/_probe_for_test_layers.py:2: imports restream_kit.engines.serial "
        "(restream_kit/planner must not import a layer above it)",
        "restream_kit/planner/_probe_for_test_layers.py:3: imports plotly.express "
        "(the core imports without the notebook layer)",
    ]


@pytest.mark.parametrize(
    "package",
    [
        "restream_kit",
        *(who.replace("/", ".") for who, _ in LAYERS if not who.endswith(".py")),
        "widgets",
    ],
)
def test_each_layer_says_what_it_may_import(package):
    path = ROOT / package.replace(".", "/") / "__init__.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert "May import" in doc, f"{path}: the docstring does not say what the package may import"


def test_the_core_runs_without_the_notebook_libraries_and_spark(tmp_path):
    """Importing those libraries fails in this process; the core, the planner, the CLI's
    parser and a serial replay must not notice."""
    code = textwrap.dedent(
        """
        import importlib.abc, sys

        class Refuse(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{name} is blocked by test_layers")

        BLOCKED = {"widgets", "plotly", "ipywidgets", "anywidget", "pyspark", "IPython"}
        sys.meta_path.insert(0, Refuse())
        import restream_kit as rk
        from restream_kit import cli, planner, engines
        from restream_kit.engines import serial
        cli.build_parser()
        result = rk.replay("social_rule.py", "social_small")
        rk.plan("social_rule.py")
        print("ROWS", len(result["spam"]))
        """
    )
    (tmp_path / "social_rule.py").write_text((ROOT / "examples" / "antispam.py").read_text())
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split("ROWS")[1]) > 0
