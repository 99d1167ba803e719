"""A long-lived Spark driver for the command line: ``restream driver --master URL``.

A ``restream replay --engine spark`` process starts its own JVM and, on a cluster, gets its
own executors: seconds before its first event (about 35 s on ``make cluster``'s two workers),
which a serial process never pays. ``restream driver`` keeps one session up, with its
executors and the logs it has loaded, and listens on a Unix socket in this user's private
directory (``$RESTREAM_HOME/drivers/``, or ``./.restream/drivers/``). A replay on the same
master, from the same directory, finds it there and runs through it:

- the client loads the program and the log as before (its run catalog and ``--baseline``
  need them), then sends the program's text, the log's paths and the options as JSON;
- the driver replays on its session and sends back the progress events as they come, the
  warnings, then the result or the error, which the client shows as its own;
- Ctrl-C in the client (or the client going away) cancels the replay's Spark jobs; the driver
  goes on serving.

The driver runs one replay at a time: it holds the cluster's cores (``--conf
spark.cores.max=N`` leaves some to others). Only replays whose options the driver can take
use it: ``--conf``, ``--history`` and ``--reuse`` start their own session, as before.

The client sends JSON only, so the driver never unpickles what it is sent. The driver answers
with pickled objects (events, the result, an exception), which the client, the same user,
reads from a socket in its own private directory that nobody else can reach.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import warnings
from collections.abc import Callable
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from ..engines import get_engine, options_of
from ..io.log import as_source, default_home, is_uri, private_dir
from ..model.errors import RestreamError, RestreamWarning

__all__ = ["DRIVEN_OPTIONS", "Driver", "find_driver", "serve", "socket_path"]

#: The replay options a driver takes, as JSON; a replay with any other goes its own way.
DRIVEN_OPTIONS = (
    "master",
    "epoch",
    "checkpoint",
    "checkpoint_every",
    "resume",
    "start_from",
    "on_error",
    "params",
    "require_kinds",
)


def socket_path(master: str) -> Path:
    """Where the driver for ``master`` listens: one socket per master URL."""
    digest = hashlib.sha256(master.encode()).hexdigest()[:16]
    return default_home().resolve() / "drivers" / f"{digest}.sock"


# -- the client --------------------------------------------------------------------------------


class Driver:
    """A connection to a running driver, for one replay."""

    def __init__(self, path: Path, conn: Connection):
        self.path = path
        self.conn = conn
        self.pid: int | None = None

    def start(
        self,
        program: Any,
        logs: list[str],
        options: dict[str, Any],
        columns: dict[str, str | None] | None = None,
    ) -> None:
        """Send the replay: the driver starts at once, while this process goes on (loading
        the log for its catalog, say) until :meth:`finish`. ``columns`` (``ts``, ``kind``)
        say how to read the log, as ``Log`` takes them."""
        request = {
            "program": {
                "source": program.source,
                "filename": program.filename,
                "name": program.name,
            },
            "logs": [_absolute_log(value) for value in logs],
            "columns": {k: v for k, v in (columns or {}).items() if v is not None},
            "options": _request_options(options),
        }
        self.conn.send_bytes(json.dumps(request).encode())

    def finish(self, observer) -> Any:
        """The result, or the driver's error raised here, once the replay ends. Ctrl-C
        cancels the replay there, then raises ``KeyboardInterrupt`` here."""
        with self.conn:
            try:
                return self._answer(observer)
            except KeyboardInterrupt:
                try:
                    self.conn.send_bytes(b"cancel")
                    while True:  # until the driver says the replay ended
                        self._answer(observer)
                except (Exception, KeyboardInterrupt):  # noqa: BLE001 - cancelled, whatever it said
                    pass
                raise

    def close(self) -> None:
        """Give up on the replay (the driver cancels it)."""
        self.conn.close()

    def _answer(self, observer) -> Any:
        while True:
            try:
                what, *rest = self.conn.recv()
            except EOFError:
                raise RestreamError(
                    f"the driver at {self.path} stopped during the replay"
                ) from None
            if what == "started":
                self.pid = rest[0]
            elif what == "event":
                if observer is not None:
                    observer(rest[0])
            elif what == "warning":
                category, message, filename, lineno = rest
                warnings.warn_explicit(message, category, filename, lineno)
            elif what == "result":
                return rest[0]
            elif what == "error":
                raise rest[0]


def find_driver(master: str | None, options: dict[str, Any]) -> Driver | None:
    """The running driver for ``master`` when there is one and these options can go to it."""
    if not master or any(v is not None for k, v in options.items() if k not in DRIVEN_OPTIONS):
        return None
    path = socket_path(master)
    if not path.exists():
        return None
    try:
        return Driver(path, Client(str(path), family="AF_UNIX"))
    except OSError:  # a socket left by a driver that was killed
        return None


def _absolute_log(value: str) -> str:
    """A ``--log`` value, read as :class:`~restream_kit.io.log.Log` reads it, with its file's
    path made absolute (a sample name or a URI stays as it is)."""
    source = as_source(value)
    if source.path is None or is_uri(source.path) or not Path(source.path).exists():
        return value
    path = str(Path(source.path).resolve())
    return f"{source.name}={path}" if source.name else path


def _request_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options the driver takes, with the files they name as absolute paths (the
    driver's directory is not the client's)."""
    out = {k: v for k, v in options.items() if k in DRIVEN_OPTIONS and v is not None}
    if "checkpoint" in out:
        out["checkpoint"] = str(Path(out["checkpoint"]).resolve())
    start = out.get("start_from")
    if isinstance(start, tuple | list):
        out["start_from"] = [str(Path(start[0]).resolve()), start[1]]
    elif start is not None:
        out["start_from"] = str(Path(start).resolve())
    return out


# -- the driver --------------------------------------------------------------------------------


def serve(master: str, conf: dict[str, str] | None = None, ready: Callable | None = None) -> None:
    """Serve replays on ``master`` until killed. ``ready(path)`` is called once the session
    is up and the socket listens."""
    path = socket_path(master)
    private_dir(path.parent)
    if path.exists():
        try:
            Client(str(path), family="AF_UNIX").close()
        except OSError:
            path.unlink()  # left by a driver that was killed
        else:
            raise RestreamError(f"a driver for {master} already listens at {path}")
    # Up and warm before it listens: a client never waits for the JVM, the executors or their
    # first Python workers.
    spark = get_engine("spark")
    _warm_up(*spark.session(options_of(spark, {"master": master, "conf": conf})))
    logs = _Logs()
    with Listener(str(path), family="AF_UNIX") as listener:
        os.chmod(path, 0o600)
        if ready is not None:
            ready(path)
        while True:
            try:
                conn = listener.accept()
            except OSError:
                continue
            with conn:
                try:
                    _serve_one(conn, logs)
                except (EOFError, OSError):  # the client went away before it asked
                    pass
                except Exception as exc:  # noqa: BLE001 - a bad request must not stop the driver
                    print(f"restream driver: a request failed: {exc!r}", file=sys.stderr)


#: The warm-up's programs: one lowered to columns (the prefix path), one that is not (passes).
_WARM_PROGRAMS = {
    "lowered": """
from restream_kit import on, state
counts = state.Counter()

@on("tick")
def count(e):
    counts[e.key] += 1
""",
    "ordinary": """
from restream_kit import emit, on, state
level = state.Map(default=0.0)

@on("tick")
def smooth(e):
    level[e.key] = level[e.key] * 0.5 + e.x
    if level[e.key] > 8.0:
        emit("high", key=e.key)
""",
}


def _warm_up(session: Any, cores: int, rounds: int = 3) -> None:
    """Replay a small log a few times on each path, every executor's core taking a task:
    the executors' Python workers, the package's imports and the JVM's compiled code are
    then ready for the first client's replay."""
    from ..api import replay
    from ..io.log import Log
    from ..model.program import Program

    n = 2_000 * cores
    log = Log([{"kind": "tick", "ts": i, "key": i % 13, "x": float(i % 7)} for i in range(n)])
    for _ in range(rounds):
        for name, source in _WARM_PROGRAMS.items():
            program = Program.from_source(source, name=f"warm_up_{name}")
            replay(program, log, engine="spark", session=session, epoch=-(-n // cores))


class _Logs:
    """The logs the driver has loaded, kept while their files are unchanged."""

    def __init__(self) -> None:
        self.loaded: dict[tuple, Any] = {}

    def get(self, values: list[str], columns: dict[str, str] | None = None) -> Any:
        from ..io.log import Log

        columns = columns or {}
        key = (*((v, _stat(v)) for v in values), tuple(sorted(columns.items())))
        if key not in self.loaded:
            self.loaded.clear()  # one log at a time: a driver should not hoard memory
            self.loaded[key] = Log(values, ts=columns.get("ts"), kind=columns.get("kind"))
        return self.loaded[key]


def _stat(value: str) -> tuple | None:
    """The file of a ``--log`` value as it stands (None for a sample name or a URI)."""
    path = as_source(value).path
    if not path or is_uri(path):
        return None
    try:
        st = Path(path).stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _serve_one(conn: Connection, logs: _Logs) -> None:
    from ..api import replay
    from ..io.progress import CancelToken
    from ..model.program import Program

    request = json.loads(conn.recv_bytes())
    lock = threading.Lock()

    def send(*message: Any) -> None:
        with lock:
            try:
                conn.send(message)
            except OSError:
                cancel.cancel()  # nobody is listening any more

    cancel = CancelToken()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                spec = request["program"]
                program = Program(spec["source"], spec["filename"], spec["name"])
                options = dict(request["options"])
                if isinstance(options.get("start_from"), list):
                    options["start_from"] = tuple(options["start_from"])
                outcome["result"] = replay(
                    program,
                    logs.get(request["logs"], request.get("columns")),
                    engine="spark",
                    observer=lambda event: send("event", event),
                    cancel=cancel,
                    **options,
                )
            for w in caught:
                category = w.category if issubclass(w.category, Warning) else RestreamWarning
                send("warning", category, str(w.message), w.filename, w.lineno)
        except BaseException as exc:  # noqa: BLE001 - every error goes to the client
            outcome["error"] = exc

    send("started", os.getpid())
    worker = threading.Thread(target=run, name="restream-driver-replay", daemon=True)
    worker.start()
    listening = True
    while worker.is_alive():
        worker.join(0.1)
        if listening and conn.poll(0):
            try:
                message = conn.recv_bytes()
            except (EOFError, OSError):
                message, listening = b"cancel", False
            if message == b"cancel":
                cancel.cancel()
    if "error" in outcome:
        send("error", _picklable(outcome["error"]))
        return
    try:
        send("result", outcome["result"])
    except Exception as exc:  # noqa: BLE001 - a result pickle cannot carry (a state value)
        send("error", RestreamError(f"the driver could not send the result back: {exc}"))


def _picklable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RestreamError (or RuntimeError) saying it."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001
        kind = RestreamError if isinstance(exc, RestreamError) else RuntimeError
        return kind(str(exc) if isinstance(exc, RestreamError) else f"{type(exc).__name__}: {exc}")
