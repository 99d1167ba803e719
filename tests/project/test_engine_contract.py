"""Code outside the engines asks the engine contract, and options are typed and checked.

- No module outside ``restream_kit/engines/`` compares a value with an engine's name (a
  string constant equal to a registered engine's name in ``==``, ``!=``, ``in``, ``not in``,
  a ``match`` case or a ``startswith``/``endswith`` test): it asks the engine's ``Capabilities`` instead. Names written
  elsewhere are allowed: parameter defaults (``engine="serial"``), keyword arguments
  (``replay(..., engine="spark")``), messages and docstrings.
- An option no engine has, or a value of the wrong type, is one error naming it, from the API
  and from the command line, before Spark is asked to start.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import restream_kit as rk
from restream_kit.engines import (
    Capabilities,
    EngineOptions,
    OptionError,
    capabilities_of,
    engine_names,
    get_engine,
)

ROOT = Path(__file__).resolve().parents[2]
#: Where engine names may be compared: the engines themselves.
ENGINES_DIR = "restream_kit/engines"
#: A master no Spark runs on: a replay that tried to start Spark would fail naming it.
NOWHERE = "spark://127.0.0.1:9"


def _names_in(node: ast.AST, names: set[str]) -> list[str]:
    """The engine names ``node`` is, or holds as a literal tuple, list or set."""
    if isinstance(node, ast.Constant) and node.value in names:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for elt in node.elts for n in _names_in(elt, names)]
    return []


def name_comparisons(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every comparison of a value with an engine name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                found += [(node.lineno, n) for n in _names_in(operand, names)]
        elif isinstance(node, ast.MatchValue):
            found += [(node.lineno, n) for n in _names_in(node.value, names)]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith", "removeprefix", "removesuffix")
        ):
            # A label tested for an engine's name ("serial replay of ...") is a comparison too.
            found += [(node.lineno, n) for arg in node.args for n in _names_in(arg, names)]
    return found


def test_the_checker_finds_comparisons_and_allows_defaults_and_words():
    source = (
        'def f(engine="serial"):\n'
        '    """Runs on "spark" too."""\n'
        '    if engine == "spark":\n'
        "        pass\n"
        '    ok = engine in ("serial", "spark") or "serial" != engine\n'
        '    g(engine="spark", label=f"serial replay of {engine}")\n'
        "    match engine:\n"
        '        case "spark":\n'
        "            pass\n"
        '    return label.startswith("serial")\n'
    )
    found = name_comparisons(source, {"serial", "spark"})
    assert sorted(found) == [
        (3, "spark"), (5, "serial"), (5, "serial"), (5, "spark"), (8, "spark"), (10, "serial")
    ]  # fmt: skip


def test_no_engine_name_is_compared_outside_the_engines():
    names = set(engine_names())
    sources = sorted(p for d in ("restream_kit", "widgets") for p in (ROOT / d).rglob("*.py"))
    found = []
    for path in sources:
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(ENGINES_DIR + "/"):
            continue
        found += [
            f"{rel}:{line}: {name!r}" for line, name in name_comparisons(path.read_text(), names)
        ]
    assert not found, (
        "engine names compared outside restream_kit/engines/ (ask the engine's "
        "capabilities instead):\n" + "\n".join(found)
    )


def test_the_builtin_engines_say_what_they_can_do_and_type_their_options():
    serial, spark = get_engine("serial"), get_engine("spark")
    assert capabilities_of(serial).oracle and capabilities_of(serial).in_process
    assert not capabilities_of(spark).oracle and capabilities_of(spark).parallel
    assert all(isinstance(e.capabilities, Capabilities) for e in (serial, spark))
    assert all(issubclass(e.options_type, EngineOptions) for e in (serial, spark))
    # An engine that says nothing gets the assumptions that always hold.
    assert capabilities_of(object()) == Capabilities()
    built = spark.options_type.of({"epoch": "1h", "partitions": 4, "master": None})
    assert (built.epoch, built.partitions, built.master, built.path) == ("1h", 4, None, "auto")
    with pytest.raises(AttributeError):
        built.partitions = 2  # frozen: built once


@pytest.mark.parametrize("engine", ["serial", "spark"])
def test_an_unknown_or_mistyped_option_is_one_error_naming_it(engine):
    program, log = rk.Program.load(ROOT / "examples/antispam.py"), rk.Log("social_small")
    # master= points nowhere: had Spark been asked to start, the error would name it.
    with pytest.raises(OptionError, match=rf"the {engine} engine .*bogus= is not an option"):
        rk.replay(program, log, engine=engine, bogus=1, master=NOWHERE)
    with pytest.raises(OptionError, match=r"epoch= must be an int or a str, not list \[1\]"):
        rk.replay(program, log, engine=engine, epoch=[1], master=NOWHERE)
    if engine == "spark":
        with pytest.raises(OptionError, match=r"partitions= must be an int, not str 'two'"):
            rk.replay(program, log, engine=engine, partitions="two", master=NOWHERE)


def test_another_engines_option_is_set_aside():
    """One set of options replays on every engine (the matrix, a cell switching --engine)."""
    program, log = rk.Program.load(ROOT / "examples/antispam.py"), rk.Log("social_small")
    got = rk.replay(program, log, engine="serial", partitions=2, path="passes", master=NOWHERE)
    assert got.state == rk.replay(program, log).state


def test_the_command_line_refuses_a_bad_option_in_one_line_before_spark_starts(tmp_path):
    restream = [sys.executable, "-m", "restream_kit"]
    out = subprocess.run(
        [*restream, "replay", str(ROOT / "examples/antispam.py"), "--log", "social_small",
         "--engine", "spark", "--master", NOWHERE, "--epoch", "banana", "--no-record"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines == [
        "error: epoch 'banana' is neither a number of events nor a duration like 30s, 15min, 1h, 1d"
    ], out.stderr


def test_where_to_look_and_engine_errors_come_from_the_engine():
    """The notebook's monitor and error lines ask the engines, not Spark's modules."""
    from restream_kit.engines import diagnostics, error_line
    from widgets.magics import _error_lines

    assert diagnostics("serial") is None
    said = diagnostics("spark")
    assert said.label == "Spark" and said.log_path.name == "spark.log" and said.ui_switch
    java = type("Py4JJavaError", (Exception,), {"__module__": "py4j.protocol"})
    error = java("An error occurred\n\tat x\nCaused by: java.io.IOException: disk full\n\tat y")
    line = error_line(error)
    assert line.startswith("Py4JJavaError: java.io.IOException: disk full (Spark's log: ")
    assert line.endswith("spark.log)")
    assert _error_lines(error) == [error_line(error)]
    assert error_line(ValueError("x")) is None
    assert _error_lines(ValueError("x")) == ["ValueError: x"]
