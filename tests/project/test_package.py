"""The package outside the checkout: the wheel ``pip install .`` builds, installed (not
editable) into a fresh virtual environment, used from a directory that is not the checkout.

The wheel is built as ``pip install .`` builds it (``pip wheel``, with build isolation: pip
takes setuptools from its configured index or cache). The fresh environment is made with
``venv`` and sees the shared environment's dependencies through a ``.pth`` line (a plain path,
so the shared environment's own editable restream_kit is not activated), and restream_kit is
installed from the wheel with ``--no-deps --no-index``: nothing else is downloaded. Every
command runs without ``PYTHONPATH``, from an empty directory. A step that cannot run fails
the test with its output.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: What `pip install .` needs from the checkout (the rest of the tree never reaches the wheel).
SOURCES = ("pyproject.toml", "README.md", "restream_kit", "widgets", "sample_data")


def _run(command: list[str], cwd: Path, env: dict, timeout: float = 300) -> str:
    out = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, command))} exited with {out.returncode}:\n"
            f"{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
        )
    return out.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel, venv python, venv site-packages, environment, an empty working directory)."""
    base = tmp_path_factory.mktemp("package")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["RESTREAM_HOME"] = str(base / "home")
    source = base / "source"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "generated", "*.egg-info", "build")
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, source / name, ignore=ignore, symlinks=False)
        else:
            shutil.copy2(src, source / name)
    dist = base / "dist"
    _run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(dist)],
         base, env, timeout=600)  # fmt: skip
    wheels = list(dist.glob("restream_kit-*.whl"))
    assert len(wheels) == 1, f"pip wheel made {wheels}"
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], base, env)
    python = venv / "bin" / "python"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
             base, env).strip()
    )  # fmt: skip
    # The shared environment's dependencies, as a plain path: its .pth files stay inactive.
    (site / "_shared_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--no-index", "--ignore-installed", "-q", str(wheels[0])], base, env)  # fmt: skip
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    return wheels[0], python, site, env, elsewhere


def _python(installed, code: str) -> str:
    _wheel, python, _site, env, elsewhere = installed
    return _run([str(python), "-c", textwrap.dedent(code)], elsewhere, env)


def test_the_wheel_holds_the_package_its_samples_and_no_checkout_files(installed):
    names = zipfile.ZipFile(installed[0]).namelist()
    for needed in (
        "restream_kit/engines/_builtin.py",
        "widgets/workbench.py",
        "sample_data/antispam.py",
        "sample_data/social_small.parquet",
        "sample_data/labels/social_small.parquet",  # rk.sample_data("social_small_labels")
        "sample_data/adclicks_small/clicks.parquet",
        # The demo notebooks' rules: rk.sample_program("iot") and the others.
        *(f"sample_data/programs/{n}.py" for n in ("iot", "streamscope", "adclicks", "flights")),
        "sample_data/programs/rate_limit.py",
    ):
        assert needed in names, f"{needed} is not in the wheel"
    leaked = [n for n in names if n.startswith(("examples/", "tests/", "bench/", "notebooks/"))]
    assert not leaked and not any("/generated/" in n for n in names), leaked
    points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(installed[0]).read(points).decode()
    assert "[restream_kit.engines]" in text and "restream = restream_kit.cli:main" in text


def test_the_installed_package_is_the_wheel_and_registers_its_engines(installed):
    site = installed[2]
    out = _python(
        installed,
        """
        import importlib.metadata as m, restream_kit, widgets, sample_data
        from restream_kit.engines import BUILTIN, engine_names
        print(restream_kit.__file__); print(widgets.__file__); print(sample_data.__file__)
        points = m.entry_points(group="restream_kit.engines")
        print({p.name: p.value for p in points} == BUILTIN, engine_names())
        """,
    )
    lines = out.splitlines()
    for line in lines[:3]:
        assert Path(line).is_relative_to(site), f"{line} is not the installed copy"
    assert lines[3] == "True ('serial', 'spark')"


def test_restream_replay_runs_from_any_directory(installed):
    _wheel, python, site, env, elsewhere = installed
    program = _python(
        installed,
        "from restream_kit.io.samples import sample_program; print(sample_program('antispam'))",
    ).strip()
    assert Path(program).is_relative_to(site)
    restream = str(python.parent / "restream")
    out = _run([restream, "replay", program, "--log", "social_small", "--engine", "serial",
                "--json", "--quiet"], elsewhere, env)  # fmt: skip
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["metrics"]["events"] == 50_000
    assert summary["tables"]["spam"] > 0
    # Run by name, recorded in the catalog under RESTREAM_HOME, listed by `restream runs`.
    assert "antispam" in _run([restream, "runs"], elsewhere, env)


def test_load_ext_in_an_ipython_shell_imports_the_notebook_layer_only_for_a_cell(installed):
    site = installed[2]
    out = _python(
        installed,
        """
        import sys
        from IPython.core.interactiveshell import InteractiveShell
        from restream_kit.io.samples import sample_program
        import restream_kit
        # import restream_kit brings no notebook code; %load_ext imports the magics
        # (widgets.magics, which preloads what the first cell needs).
        print("lazy", "widgets" not in sys.modules and "ipywidgets" not in sys.modules)
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "restream_kit")
        print("magic", "restream" in shell.magics_manager.magics["cell"])
        cell = shell.run_cell("%%restream v1 --log social_small\\n" + sample_program("antispam").read_text())
        print("ran", cell.success)
        print("rows", len(shell.user_ns["v1"].wait().result["spam"]))
        print("widgets", sys.modules["widgets"].__file__)
        """,
    )
    found = dict(line.split(" ", 1) for line in out.splitlines() if line.split(" ")[0] in
                 ("magic", "lazy", "ran", "rows", "widgets"))  # fmt: skip
    assert found["magic"] == "True" and found["lazy"] == "True" and found["ran"] == "True", out
    assert int(found["rows"]) > 0
    assert Path(found["widgets"]).is_relative_to(site)


def test_restream_bench_runs_the_builtin_benchmark_when_installed(installed):
    _wheel, python, _site, env, elsewhere = installed
    out = _run([str(python.parent / "restream"), "bench", "--runs", "1", "--json"], elsewhere, env)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["benchmark"] == "builtin serial vs plain loop"
    assert result["events"] == 50_000 and result["spam_rows"] > 0 and result["ratio"] > 0


def test_the_jvm_archive_trains_on_what_the_package_ships(installed):
    site = installed[2]
    out = _python(
        installed,
        """
        from restream_kit.engines.spark.session._jvm_archive import training_inputs
        for path in training_inputs():
            print(path, path.is_file())
        """,
    )
    for line in out.splitlines():
        path, exists = line.rsplit(" ", 1)
        assert Path(path).is_relative_to(site) and exists == "True", line
