"""The engine contract (``restream_kit.engines``): the registry, ``supports``, and everything
whose engine choices come from it (the command line, the magics, the test matrix)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import restream_kit as rk
from restream_kit import engines as registry
from restream_kit.engines import Engine, EngineUnsupported, engine_names, get_engine

PLUGIN = '''
"""A third-party engine: the serial replay under another name."""
from restream_kit.engines.serial import replay as serial_replay


class EchoEngine:
    name = "echo"
    description = "the serial replay, registered by another package"

    def supports(self, program, log, options):
        return "it refuses epochs" if options.get("epoch") else None

    def replay(self, program, log, *, observer=None, **options):
        return serial_replay(program, log, observer=observer, **options)
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A real installed distribution (a ``.dist-info`` on ``sys.path``) registering ``echo``."""
    (tmp_path / "echo_engine.py").write_text(PLUGIN)
    info = tmp_path / "echo_engine-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-engine\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[restream_kit.engines]\necho = echo_engine:EchoEngine\nserial = echo_engine:EchoEngine\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.engines.cache_clear()
    yield "echo"
    monkeypatch.undo()
    sys.modules.pop("echo_engine", None)
    registry.engines.cache_clear()


def test_the_builtin_engines_are_registered_serial_first():
    assert engine_names()[:2] == ("serial", "spark")
    assert registry.ENGINES == engine_names()
    for name in ("serial", "spark"):
        engine = get_engine(name)
        assert isinstance(engine, Engine) and engine.name == name and engine.description


def test_an_unknown_engine_is_one_clear_error():
    with pytest.raises(rk.RestreamError, match=r"unknown engine 'flink'; choose one of serial"):
        get_engine("flink")
    with pytest.raises(rk.RestreamError, match="unknown engine 'flink'"):
        rk.replay("examples/antispam.py", "social_small", engine="flink")


def test_loading_the_registry_does_not_import_spark():
    code = (
        "import sys; from restream_kit.engines import engines; engines(); "
        "print(sorted(m for m in sys.modules if m.startswith(('pyspark', "
        "'restream_kit.engines.s'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_supports_refuses_before_any_event_is_read():
    spark = get_engine("spark")
    program, log = rk.Program.load("examples/antispam.py"), rk.Log("social_small")
    assert spark.supports(program, log, {}) is None
    assert get_engine("serial").supports(program, log, {"path": "anything"}) is None
    reason = spark.supports(program, log, {"path": "sideways"})
    assert reason and "'sideways'" in reason
    # Raised by replay before the JVM is asked to start.
    with pytest.raises(EngineUnsupported, match="the spark engine cannot run this replay: path"):
        rk.replay(program, log, engine="spark", path="sideways")


def test_a_registered_engine_appears_everywhere(plugin, tmp_path):
    assert engine_names() == ("serial", "spark", "echo")
    # The plugin also claims "serial": the oracle cannot be replaced.
    from restream_kit.engines._builtin import SerialEngine

    assert type(get_engine("serial")) is SerialEngine
    assert type(registry.engines()["serial"]) is SerialEngine
    from restream_kit.cli import build_parser

    commands = next(a for a in build_parser()._actions if a.dest == "command")
    engine_arg = next(a for a in commands.choices["replay"]._actions if a.dest == "engine")
    assert tuple(engine_arg.choices) == ("serial", "spark", "echo")
    assert "echo: the serial replay, registered by another package" in engine_arg.help
    program, log = rk.Program.load("examples/antispam.py"), rk.Log("social_small")
    got = rk.replay(program, log, engine="echo")
    want = rk.replay(program, log, engine="serial")
    assert got["spam"].equals(want["spam"]) and got.state == want.state
    with pytest.raises(EngineUnsupported, match="echo engine cannot run this replay: it refuses"):
        rk.replay(program, log, engine="echo", epoch=1000)


def test_the_magics_offer_the_registered_engines():
    from widgets.magics import RestreamMagics

    parser = RestreamMagics.restream.parser
    engine_arg = next(a for a in parser._actions if a.dest == "engine")
    assert tuple(engine_arg.choices) == engine_names()


def test_the_matrix_is_the_registry_and_the_cluster_placements():
    from engine_matrix import CLUSTER_ENGINES, ENGINE_PARAMS, engine_of_param

    assert ENGINE_PARAMS == [*engine_names(), *CLUSTER_ENGINES]
    assert {engine_of_param(p) for p in ENGINE_PARAMS} == set(engine_names())


def test_notyet_names_the_exception_and_is_strict(tmp_path, root):
    """An inner pytest session over the real conftest: a gap raising the named exception is
    an xfail, any other exception a failure, a gap that closed a failure (strict), and a
    marker without ``raises`` an error."""
    tests = tmp_path / "tests"
    tests.mkdir()
    # The suite's own conftest, loaded under another name (this file is "conftest" too).
    (tests / "conftest.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('suite_conftest', {str(root / 'tests' / 'conftest.py')!r})\n"
        "suite = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(suite)\n"
        "engine, pytest_configure = suite.engine, suite.pytest_configure\n"
        "_isolated_home = suite._isolated_home\n"
    )
    (tests / "test_gap.py").write_text(
        textwrap.dedent(
            """
            import pytest
            from restream_kit.model.errors import LogError

            def run(engine, exc):
                if engine == "serial" and exc is not None:
                    raise exc("gap")

            @pytest.mark.notyet(["serial"], raises=LogError, reason="a known gap")
            def test_gap_named(engine):
                run(engine, LogError)

            @pytest.mark.notyet(["serial"], raises=LogError, reason="a known gap")
            def test_other_exception(engine):
                run(engine, KeyError)

            @pytest.mark.notyet(["serial"], raises=LogError, reason="a known gap")
            def test_gap_closed(engine):
                run(engine, None)

            @pytest.mark.notyet(["serial"], reason="no exception named")
            def test_unnamed(engine):
                run(engine, None)
            """
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
         "-k", "serial", str(tests)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    report = out.stdout + out.stderr
    assert "XFAIL tests/test_gap.py::test_gap_named[serial]" in report, report
    assert "FAILED tests/test_gap.py::test_other_exception[serial]" in report, report
    assert "FAILED tests/test_gap.py::test_gap_closed[serial]" in report, report
    assert "[XPASS(strict)]" in report, report
    assert "ERROR tests/test_gap.py::test_unnamed[serial]" in report, report
    assert "name the exception the gap raises" in report, report
