"""The catalogue of bad inputs: each one, on every engine, through the command line.

Every case must end with exit status 2 and exactly one line on stderr that names the file,
column, row, handler or line, without a traceback. The Spark cases run in this process, on
the shared session, through ``restream_kit.cli.main`` (one child process per case would cost
a JVM start each). The real executable with ``--engine spark`` runs, each in its own process,
cases that fail before the replay, while the JVM starts on another thread (its output must not
take the line with it): one per stage they fail at (reading the log, parsing its columns,
loading the program, checking it against the log); and one that a Spark task finds.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import restream_kit as rk
from restream_kit.cli import main

COUNT = """\
from restream_kit import emit, on, state

seen = state.Counter()

@on("click")
def count(e):
    seen[e.user] += 1
    emit("counts", user=e.user, n=seen[e.user])
"""

GOOD_LOG = "ts,kind,user\n" + "".join(f"{i},click,{'abc'[i % 3]}\n" for i in range(12))


def _handler(body: str, header: str = "seen = state.Counter()\n") -> str:
    """A program with one handler ``count`` on "click" whose body is ``body``."""
    return (
        "from restream_kit import emit, on, state\n\n"
        + header
        + "\n@on('click')\ndef count(e):\n"
        + "".join(f"    {line}\n" for line in body.splitlines())
    )


@dataclass
class Case:
    """A program and a log (file name -> text, bytes or Arrow table) and the line expected."""

    program: str = COUNT
    log: dict = field(default_factory=lambda: {"log.csv": GOOD_LOG})
    expected: str = ""  # a regular expression; {d} is the case's directory
    args: tuple = ()  # more arguments; {d} is the case's directory
    files: dict = field(default_factory=dict)  # other files to make (path -> text)
    in_replay: bool = False  # found by the replay itself, not before it (on Spark: in Spark)


CASES = {
    "missing log": Case(log={"missing.csv": None}, expected=r"{d}/missing.csv: log file not found"),
    "unreadable log": Case(
        log={"junk.parquet": b"not parquet at all"}, expected=r"{d}/junk.parquet: cannot read log"
    ),
    "missing ts": Case(
        log={"log.csv": "time,kind,user\n1,click,a\n"},
        expected=r"{d}/log.csv, column 'ts': no 'ts' column",
    ),
    "null ts": Case(
        log={
            "log.parquet": pa.table(
                {"ts": [1, None, 3], "kind": ["click"] * 3, "user": list("abc")}
            )
        },
        expected=r"{d}/log.parquet, column 'ts', row 1: ts is null",
    ),
    "mixed-type ts": Case(
        log={"log.csv": "ts,kind,user\n1,click,a\n2,click,b\nnoon,click,c\n"},
        expected=r"{d}/log.csv, column 'ts', row 2: ts 'noon'",
    ),
    "lsn out of order": Case(
        log={
            "log.parquet": pa.table(
                {"ts": [2, 1], "lsn": [0, 1], "kind": ["click"] * 2, "user": ["a", "b"]}
            )
        },
        expected=r"{d}/log.parquet, column 'lsn', row 1: explicit lsn 1 at ts 1",
    ),
    "lsn duplicated": Case(
        log={
            "log.parquet": pa.table(
                {"ts": [1, 1, 2], "lsn": [0, 0, 1], "kind": ["click"] * 3, "user": list("abc")}
            )
        },
        expected=r"{d}/log.parquet, column 'lsn', row 1: explicit lsn 0",
    ),
    "empty log": Case(
        log={
            "log.parquet": pa.table(
                {"ts": pa.array([], pa.int64()), "kind": pa.array([], pa.string())}
            )
        },
        expected=r"{d}/log.parquet: the log has no events",
    ),
    "syntax error": Case(
        program=_handler("seen[e.user] += = 1"), expected=r"{d}/program.py:7: syntax error"
    ),
    "undeclared state": Case(
        program=_handler("unknown[e.user] = 1"),
        expected=r"{d}/program.py:7: write to 'unknown', which is undeclared state: declare it",
    ),
    "write into the past": Case(
        in_replay=True,
        program=_handler("seen.add(e.user, 1, at=e.ts - 1)"),
        expected=r"{d}/program.py:7: handler 'count' raised TimeTravelError: write at -1 is "
        r"earlier than the event's time 0 on 'click' event lsn 0 at ts 0",
    ),
    "handler raising": Case(
        in_replay=True,
        program=_handler("seen[e.user] += 1\nif e.ts == 5:\n    raise KeyError(e.user)"),
        expected=r"{d}/program.py:9: handler 'count' raised KeyError: 'c' on 'click' event lsn 5 "
        r"at ts 5 {user=.c.}; `raise KeyError\(e.user\)`",
    ),
    "non-serializable state": Case(
        in_replay=True,
        program=_handler("seen[e.user] = lambda: 1"),
        expected=r"state 'seen', key 'a': the value <function count.<locals>.<lambda> at 0x[0-9a-f]+> "
        r"cannot be serialized",
    ),
    "non-serializable emitted value": Case(
        in_replay=True,
        program=_handler("emit('bad', user=e.user, f=lambda: 1)"),
        expected=r"table 'bad': field 'f' holds values that cannot be stored in a table",
    ),
    "a checkpoint directory that is not one": Case(
        files={"busy/data.csv": "x\n1\n"},
        args=("--checkpoint", "{d}/busy"),
        expected=r".*busy.*not empty and is not a restream checkpoint",
    ),
    "one field, two types": Case(
        in_replay=True,
        program=_handler("emit('mixed', v=e.ts if e.ts < 4 else str(e.ts))"),
        expected=r"table 'mixed': field 'v' is int in earlier rows but str \('4'\) in the row "
        r"emitted by handler 'count' at lsn 4",
    ),
}


def _materialize(case: Case, d: Path) -> tuple[Path, list[str]]:
    program = d / "program.py"
    program.write_text(case.program)
    logs = []
    for name, content in case.log.items():
        path = d / name
        if isinstance(content, str):
            path.write_text(content)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, pa.Table):
            pq.write_table(content, path)
        logs += ["--log", str(path)]
    for name, text in case.files.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
    return program, logs


def _replay(program, logs, engine: str, out, capsys, *extra: str) -> tuple[int, str]:
    """``restream replay PROGRAM LOGS --engine ENGINE --quiet --out OUT EXTRA...``: the exit
    code and standard error."""
    args = ["replay", str(program), *logs, "--engine", engine, "--quiet", "--out", str(out)]
    code = main([*args, *extra])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_exit_2_on_every_engine(name, engine, tmp_path, capsys):
    case = CASES[name]
    program, logs = _materialize(case, tmp_path)
    out = tmp_path / "out"
    extra = (arg.replace("{d}", str(tmp_path)) for arg in case.args)
    code, err = _replay(program, logs, engine, out, capsys, *extra)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    expected = "^error: " + case.expected.replace("{d}", re.escape(str(tmp_path)))
    assert re.search(expected, lines[0]), f"{lines[0]!r} does not match {expected!r}"
    # --out always says what happened, even when nothing finished.
    assert (out / "ERROR").read_text().splitlines()[0] == lines[0]


def test_finished_epochs_stay_on_disk_with_an_error_file(engine, tmp_path, capsys):
    """A handler raises at lsn 9: the epochs of 4 events before it are written, as they are
    in a complete replay, and ERROR says where it stopped."""
    program, logs = _materialize(
        Case(
            program=_handler(
                "seen[e.user] += 1\nemit('counts', user=e.user, n=seen[e.user])\n"
                "if e.lsn == 9:\n    raise ValueError('nine')"
            )
        ),
        tmp_path,
    )
    out = tmp_path / "out"
    code, err = _replay(program, logs, engine, out, capsys, "--epoch", "4")
    assert code == 2 and "handler 'count' raised ValueError: nine" in err
    partial = pq.read_table(out / "counts.parquet")
    complete = rk.replay(COUNT, rk.Log(str(tmp_path / "log.csv")))
    assert partial.to_pylist() == complete.tables["counts"].slice(0, 8).to_pylist()
    error = (out / "ERROR").read_text()
    assert "finished epochs: 2 of 3 (8 of 12 events)" in error
    assert "partial tables: counts.parquet (8 rows)" in error

    # The same directory after a run that works: full tables, and no stale ERROR.
    (tmp_path / "good.py").write_text(COUNT)
    code, err = _replay(tmp_path / "good.py", logs, engine, out, capsys)
    assert code == 0, err
    assert not (out / "ERROR").exists()
    assert pq.read_table(out / "counts.parquet").num_rows == 12


#: The cases a ``restream replay --engine spark`` process runs: one per stage of the checks
#: before the replay (they fail while the JVM starts) and one that a Spark task finds (a JVM
#: start: seconds each, hence not all of them; in this process every case runs on Spark).
ON_SPARK = ["missing log", "missing ts", "syntax error", "undeclared state", "handler raising"]
assert all(not CASES[name].in_replay for name in ON_SPARK[:-1]) and CASES[ON_SPARK[-1]].in_replay


def _restream(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "restream_kit", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


@pytest.mark.parametrize("name", ON_SPARK)
def test_spark_on_the_command_line_prints_the_line_as_serial_does(name, root, tmp_path):
    """``restream replay ... --engine spark`` as a user runs it: the error line on stderr,
    not in the JVM's log."""
    case = CASES[name]
    program, logs = _materialize(case, tmp_path)
    out = tmp_path / "out"
    extra = [arg.replace("{d}", str(tmp_path)) for arg in case.args]
    args = ["replay", str(program), *logs, "--engine", "spark", "--master", "local[1]", "--quiet"]
    done = _restream(*args, "--out", str(out), *extra, cwd=root)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    expected = "^error: " + case.expected.replace("{d}", re.escape(str(tmp_path)))
    assert re.search(expected, lines[0]), f"{lines[0]!r} does not match {expected!r}"
    assert (out / "ERROR").read_text().splitlines()[0] == lines[0]
