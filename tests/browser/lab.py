"""JupyterLab in headless Chromium: the server and browser fixtures and the page helpers.

The server runs from the venv on 127.0.0.1, on a free port, with a random token, over a
temporary copy of the repository's notebooks (with ``examples/`` and ``sample_data/`` beside
them, so that ``../examples/...`` still resolves). Outputs therefore never reach the committed
notebooks. Its user settings come from a temporary directory that turns notebook windowing off
(every cell stays in the DOM, so checks and screenshots see all outputs), autosave off, and
news and update checks off.

The browser is Debian's Chromium (``/usr/bin/chromium``, see ``scripts/ensure_chromium.sh``),
launched by Playwright with ``executable_path``; Playwright never downloads a browser here.

JupyterLab 4 renders an error output exactly like a stderr stream (a ``.jp-RenderedText``
with ``data-mime-type="application/vnd.jupyter.stderr"``), so no CSS selector tells the two
apart. The server is therefore started with ``expose_app_in_browser`` (as JupyterLab's own
Galata tests are) and errors are read from the notebook model, where their ``output_type`` is
``error``; failures that happen while rendering (a renderer's "Javascript Error", a widget that
cannot be displayed) are read from the DOM.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
SCREENSHOTS = REPO / "docs" / "screenshots"
CHROMIUM = Path(os.environ.get("RESTREAM_CHROMIUM", "/usr/bin/chromium"))
ENSURE_CHROMIUM = "scripts/ensure_chromium.sh"

SERVER_START_TIMEOUT_S = 60
RUN_ALL_TIMEOUT_S = 600
VIEWPORT = {"width": 1400, "height": 1000}
MAX_SCREENSHOT_HEIGHT = 30_000

# What the server sees beside notebooks/: copied, except the generated logs, which are linked.
COPIED_DIRS = ("notebooks", "examples", "sample_data")
LINKED_DIRS = ("sample_data/generated",)
IGNORED = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints", "generated")

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--font-render-hinting=none",
]

USER_SETTINGS = {
    # Every cell attached to the DOM, whether or not it is in view; no blank page after the last.
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none", "scrollPastEnd": False},
    # Never write the (copied) notebooks back.
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    # No network calls and no toasts over the notebook.
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/extensionmanager-extension/plugin": {"enabled": False},
    # Widget state saved with the notebook, as `make setup`'s JupyterLab overrides set it.
    "@jupyter-widgets/jupyterlab-manager/plugin": {"saveState": True},
}

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def require_chromium() -> Path:
    """The Chromium executable; fails the test (never skips) when it is not installed."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests drive Debian's Chromium. "
            f"Install it with `{ENSURE_CHROMIUM}` (`make test` runs it), "
            "or point RESTREAM_CHROMIUM at a Chromium executable.",
            pytrace=False,
        )
    return CHROMIUM


def require_notebook(name: str) -> Path:
    """The path of ``notebooks/<name>``; fails the test (never skips) when it does not exist."""
    path = NOTEBOOKS / name
    if not path.is_file():
        pytest.fail(f"notebook {path.relative_to(REPO)} does not exist", pytrace=False)
    return path


def jupyter_executable() -> Path:
    """The venv's ``jupyter``, beside the interpreter running the tests (or in ``.venv``)."""
    for candidate in (
        Path(sys.executable).with_name("jupyter"),
        REPO / ".venv" / "bin" / "jupyter",
    ):
        if candidate.is_file():
            return candidate
    pytest.fail("no `jupyter` next to the test interpreter nor in .venv/bin: run `make setup`")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_workspace(base: Path) -> Path:
    """Copy notebooks/ and what they read into ``base``, keeping the layout; returns notebooks/."""
    for name in COPIED_DIRS:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, base / name, ignore=IGNORED)
    for name in LINKED_DIRS:
        source = REPO / name
        if source.is_dir():
            (base / name).symlink_to(source, target_is_directory=True)
    return base / "notebooks"


def write_user_settings(settings_dir: Path) -> None:
    for plugin, values in USER_SETTINGS.items():
        path = settings_dir / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values, indent=2))


@dataclass
class LabServer:
    """A running ``jupyter lab``: where it listens, its token, and its notebooks directory."""

    port: int
    token: str
    root: Path
    log: Path
    process: subprocess.Popen = field(repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def notebook_url(self, name: str) -> str:
        # ?reset starts from an empty layout, so a notebook opened by an earlier test stays shut.
        return f"{self.base_url}/lab/tree/{name}?reset&token={self.token}"

    def api(self, path: str, method: str = "GET", timeout: float = 5.0):
        """Call the REST API with the token; returns the decoded JSON body (or None)."""
        request = urllib.request.Request(
            f"{self.base_url}/api/{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
            data=b"" if method in ("POST", "PUT") else None,
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def shutdown_kernels(self) -> None:
        """Shut every session's kernel down, so the next test starts from nothing."""
        try:
            for session in self.api("sessions"):
                self.api(f"sessions/{session['id']}", method="DELETE", timeout=30)
        except (OSError, urllib.error.URLError):
            pass


def start_lab_server(tmp: Path) -> LabServer:
    """Start ``jupyter lab`` over a copy of notebooks/ and wait until /api/status answers."""
    root = make_workspace(tmp / "workspace")
    jupyter_dirs = {
        key: tmp / "jupyter" / key for key in ("config", "runtime", "settings", "layouts")
    }
    for path in jupyter_dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    write_user_settings(jupyter_dirs["settings"])
    token = secrets.token_hex(24)
    env = dict(
        os.environ,
        RESTREAM_HOME=str(tmp / "restream_home"),
        JUPYTER_CONFIG_DIR=str(jupyter_dirs["config"]),
        JUPYTER_RUNTIME_DIR=str(jupyter_dirs["runtime"]),
        IPYTHONDIR=str(tmp / "ipython"),
        PYTHONUNBUFFERED="1",
    )
    env.pop("JUPYTER_TOKEN", None)
    command = [
        str(jupyter_executable()),
        "lab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.terminals_enabled=False",
        f"--LabApp.user_settings_dir={jupyter_dirs['settings']}",
        f"--LabApp.workspaces_dir={jupyter_dirs['layouts']}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ]
    if os.geteuid() == 0:
        command.append("--allow-root")
    # The free port may be taken between choosing it and binding it: then try another.
    for attempt in range(3):
        log = tmp / "jupyter" / f"server-{attempt}.log"
        server = _launch(command, free_port(), token, root, env, log)
        if _wait_until_up(server):
            return server
        if "already in use" not in server.log_tail():
            break
    raise RuntimeError(
        f"jupyter lab exited with code {server.process.returncode} while starting:\n"
        + server.log_tail()
    )


def _launch(command, port, token, root, env, log) -> LabServer:
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*command, f"--ServerApp.port={port}"],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return LabServer(port=port, token=token, root=root, log=log, process=process)


def _wait_until_up(server: LabServer) -> bool:
    """True once /api/status answers; False if the server exits first; raises on a timeout."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while server.process.poll() is None:
        try:
            server.api("status", timeout=2)
            return True
        except (OSError, urllib.error.URLError, ValueError):
            pass
        if time.monotonic() > deadline:
            stop_lab_server(server)
            raise RuntimeError(
                f"jupyter lab did not answer /api/status within {SERVER_START_TIMEOUT_S} s:\n"
                + server.log_tail()
            )
        time.sleep(0.25)
    return False


def stop_lab_server(server: LabServer) -> None:
    """Shut the server down through its API, then make sure it and its kernels are gone."""
    try:
        descendants = psutil.Process(server.process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    if server.process.poll() is None:
        try:
            server.api("shutdown", method="POST", timeout=10)
        except (OSError, urllib.error.URLError):
            pass
        try:
            server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            _signal_group(server.process.pid, signal.SIGTERM)
            try:
                server.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _signal_group(server.process.pid, signal.SIGKILL)
                server.process.wait(timeout=10)
    # Kernels run in sessions of their own; whatever outlived the server goes now.
    alive = [p for p in descendants if p.is_running()]
    for proc in alive:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(alive, timeout=10)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's Chromium; a missing one fails the test and names scripts/ensure_chromium.sh."""
    return require_chromium()


@pytest.fixture(scope="session")
def lab_server(chromium, tmp_path_factory):
    """JupyterLab over a temporary copy of notebooks/, for the whole session."""
    server = start_lab_server(tmp_path_factory.mktemp("jupyterlab"))
    try:
        yield server
    finally:
        stop_lab_server(server)


@pytest.fixture(scope="session")
def browser_context(chromium, tmp_path_factory):
    """A headless Chromium with a fresh profile directory, driven by Playwright."""
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(chromium),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=VIEWPORT,
            device_scale_factor=1,
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def lab_page(lab_server, browser_context):
    """A fresh browser tab; at the end it closes and every kernel is shut down."""
    page = browser_context.new_page()
    page.set_default_timeout(30_000)
    try:
        yield page
    finally:
        page.close()
        lab_server.shutdown_kernels()


# --- page helpers -----------------------------------------------------------------------------

_APP_READY_JS = """async (path) => {
    const app = window.jupyterapp;
    await app.started;
    await app.restored;
    const deadline = Date.now() + 60000;
    let panel = null;
    while (Date.now() < deadline) {
        panel = app.shell.currentWidget;
        if (panel && panel.context && panel.context.path === path && panel.content) break;
        await new Promise((resolve) => setTimeout(resolve, 100));
    }
    if (!panel || !panel.context || panel.context.path !== path) {
        const current = panel && panel.context ? panel.context.path : String(panel);
        throw new Error(`the current widget is ${current}, not ${path}`);
    }
    await panel.context.ready;
    await panel.sessionContext.ready;
    return true;
}"""

_STATE_JS = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const session = panel.sessionContext.session;
    const kernel = session && session.kernel;
    const codeCells = panel.content.widgets.filter((cell) => cell.model.type === 'code');
    const prompts = [...panel.content.node.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
        .map((node) => node.textContent.trim());
    const errors = [];
    panel.content.widgets.forEach((cell, index) => {
        if (cell.model.type !== 'code') return;
        const outputs = cell.model.outputs;
        for (let i = 0; i < outputs.length; i++) {
            const output = outputs.get(i).toJSON();
            if (output.output_type === 'error') {
                errors.push({
                    cell: index,
                    ename: output.ename,
                    evalue: output.evalue,
                    traceback: (output.traceback || []).join('\\n'),
                });
            }
        }
    });
    return {
        path: panel.context.path,
        kernel: kernel ? kernel.status : 'no kernel',
        codeCells: codeCells.length,
        prompts: prompts,
        errors: errors,
    };
}"""

_RENDER_ERRORS_JS = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const found = [];
    panel.content.node.querySelectorAll('.jp-OutputArea-output').forEach((node) => {
        const text = node.innerText || '';
        if (text.startsWith('Javascript Error:') || text.includes('Error displaying widget')) {
            found.push(text.slice(0, 500));
        }
    });
    return found;
}"""

_SCROLLER_JS = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const scroller = panel.content.node.querySelector('.jp-WindowedPanel-outer') || panel.content.node;
    scroller.scrollTop = 0;
    return {scrollHeight: scroller.scrollHeight, clientHeight: scroller.clientHeight};
}"""


def open_notebook(page, server: LabServer, name: str, timeout_s: float = 120) -> None:
    """Open ``name`` (relative to the server's root) in JupyterLab and wait for an idle kernel."""
    page.goto(server.notebook_url(name), wait_until="domcontentloaded")
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=timeout_s * 1000)
    page.evaluate(_APP_READY_JS, name)
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for(state="visible")
    _collapse_left_sidebar(page)
    wait_for_kernel_idle(page, timeout_s)


def _collapse_left_sidebar(page) -> None:
    """Give the notebook the whole width: close the file browser JupyterLab opens on the left."""
    current = page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current")
    if current.count():
        current.first.click()
        page.locator("#jp-left-stack").wait_for(state="hidden")


def notebook_state(page) -> dict:
    """The kernel status, the input prompts as shown, and the error outputs of the notebook."""
    return page.evaluate(_STATE_JS)


def wait_for_kernel_idle(page, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        state = notebook_state(page)
        if state["kernel"] == "idle":
            return state
        if state["kernel"] in ("dead", "terminating", "autorestarting"):
            pytest.fail(f"the kernel of {state['path']} is {state['kernel']}", pytrace=False)
        if time.monotonic() > deadline:
            pytest.fail(
                f"the kernel of {state['path']} is still {state['kernel']!r} after {timeout_s} s",
                pytrace=False,
            )
        time.sleep(0.25)


def run_all_cells(page) -> None:
    """Run > Run All Cells, through the menu bar as a user would."""
    page.locator(".jp-NotebookPanel .jp-Notebook").first.click(position={"x": 5, "y": 5})
    page.locator("#jp-menu-panel .lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu .lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    page.locator(".lm-Menu").first.wait_for(state="detached")


def wait_for_run(page, timeout_s: float = RUN_ALL_TIMEOUT_S) -> dict:
    """Wait until the run is over: every code cell has an execution count (or an error stopped
    the run), no cell is queued or running, and the kernel is idle, twice in a row."""
    deadline = time.monotonic() + timeout_s
    settled = 0
    while True:
        state = notebook_state(page)
        if len(state["prompts"]) != state["codeCells"]:
            pytest.fail(
                f"{len(state['prompts'])} input prompts in the DOM for {state['codeCells']} code "
                "cells: notebook windowing is not off (see USER_SETTINGS)",
                pytrace=False,
            )
        if state["kernel"] in ("dead", "autorestarting"):
            pytest.fail(f"the kernel died while running {state['path']}", pytrace=False)
        counted = all(re.fullmatch(r"\[\d+\]:", prompt) for prompt in state["prompts"])
        busy = any(prompt == "[*]:" for prompt in state["prompts"])
        over = state["kernel"] == "idle" and not busy and (counted or state["errors"])
        settled = settled + 1 if over else 0
        if settled >= 2:
            return state
        if time.monotonic() > deadline:
            pytest.fail(
                f"{state['path']} did not finish within {timeout_s} s: kernel "
                f"{state['kernel']!r}, prompts {state['prompts']}",
                pytrace=False,
            )
        time.sleep(0.5)


def error_outputs(page) -> list[str]:
    """Every error shown by the notebook: error outputs of cells, then rendering failures."""
    state = notebook_state(page)
    found = [
        f"cell {error['cell']}: {error['ename']}: {error['evalue']}\n"
        + ANSI.sub("", error["traceback"])
        for error in state["errors"]
    ]
    found += [f"rendering failed: {text}" for text in page.evaluate(_RENDER_ERRORS_JS)]
    return found


def output_text(page) -> str:
    """The visible text of every output of the notebook, in order."""
    return "\n".join(page.locator(".jp-NotebookPanel .jp-OutputArea-output").all_inner_texts())


def screenshot_notebook(page, path: Path) -> Path:
    """Save a screenshot of the whole notebook: the window is made as tall as the notebook."""
    path.parent.mkdir(parents=True, exist_ok=True)
    original = page.viewport_size or VIEWPORT
    sizes = page.evaluate(_SCROLLER_JS)
    extra = max(0, sizes["scrollHeight"] - sizes["clientHeight"])
    height = min(original["height"] + extra, MAX_SCREENSHOT_HEIGHT)
    page.set_viewport_size({"width": original["width"], "height": height})
    try:
        # Let the layout (and plotly's resize handler) settle at the new size.
        page.evaluate(_SCROLLER_JS)
        page.wait_for_timeout(1000)
        page.screenshot(path=str(path), full_page=False, animations="disabled")
    finally:
        page.set_viewport_size(original)
    return path
