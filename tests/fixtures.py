"""Shared test fixtures: one real local Ray cluster per session, real fake-provider servers.

Loaded for every test folder (tests/, prefray/benchmarks/<b>/tests/, examples/*/tests/) by the
top-level conftest.py; tests import the helpers below from here or from tests/conftest.py.

Two tiers (`python -m pytest -m "not e2e"` is the fast one): a test marked `e2e` starts a CLI
process, a Ray cluster of its own, a browser or a server, or runs a sweep on the session's cluster.
A test that asks for one of the fixtures below that do so must carry the mark (checked at collection).

`run_cli` runs the launch (`prefray.app.run("launch", argv)`) in the pytest process, a driver of the session's cluster
(through RAY_ADDRESS), so a run costs neither a Python start nor a Ray connection. Behaviour that
needs a process of its own (signals, kill -9, the exit code of a process, its environment) goes
through `launch` / `run_cli(..., process=True)`: `python -m prefray.launch` in a subprocess.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Fixtures that start a server or run on the session's Ray cluster: a test using one is `e2e`.
E2E_FIXTURES = {"ray_address", "run_cli", "fake_server", "make_fake_server", "session_fake_server"}


def pytest_collection_modifyitems(config, items):
    unmarked = [item.nodeid for item in items
                if E2E_FIXTURES & set(getattr(item, "fixturenames", ())) and item.get_closest_marker("e2e") is None]
    if unmarked:
        raise pytest.UsageError("tests using a server or the Ray cluster must be marked e2e:\n  "
                                + "\n  ".join(unmarked))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def ray_address(tmp_path_factory) -> str:
    """A real Ray head node on loopback for the whole session, stopped (only it) at the end."""
    port = free_port()
    temp = tmp_path_factory.mktemp("ray")
    # Workers (the gateways) at the driver's priority, as a cluster prefray starts itself has them
    # (engine/flow/session.py): at Ray's default niceness 15 they starve on a busy machine.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_worker_niceness": "0"}
    ray_cli = str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen([ray_cli, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
                             "--num-cpus=2", "--include-dashboard=false", f"--temp-dir={temp}",
                             # not Ray's fixed 52365: a launch's own cluster (ray.init cannot move its
                             # agent's port) would wait ~3.3 s retrying it while this cluster holds it
                             f"--dashboard-agent-listen-port={free_port()}",
                             "--disable-usage-stats"], env=env, cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"127.0.0.1:{port}"
    deadline = time.time() + 60
    while not _port_open(port):
        if time.time() > deadline or head.poll() is not None:
            head.kill()
            raise RuntimeError("ray head did not start")
        time.sleep(0.2)
    os.environ["RAY_ADDRESS"] = address
    os.environ["RAY_AUTH_MODE"] = "disabled"
    yield address
    import ray

    ray.shutdown()    # the pytest process's own driver, if an in-process launch connected it
    # `ray start --block` takes ~30 s to stop its processes one by one after a SIGTERM; nothing of
    # the session's cluster is kept, so the whole group (head, raylet, workers) is killed at once.
    os.killpg(head.pid, signal.SIGKILL)
    head.wait()


@pytest.fixture(autouse=True)
def no_driver_left(request):
    """A test that asks for the cluster's address but runs no launch in this process connects its
    own driver (or starts processes that do): it gets a process that is no Ray driver, as before
    in-process launches made the pytest process one."""
    argnames = request.node._fixtureinfo.argnames
    if "ray_address" in argnames and "run_cli" not in argnames and "ray" in sys.modules:
        import ray

        ray.shutdown()
    yield


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class FakeServer:
    port: int
    process: subprocess.Popen

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict:
        with urllib.request.urlopen(f"{self.anthropic_url}/stats", timeout=5) as response:
            return json.loads(response.read())

    def reset(self) -> None:
        request = urllib.request.Request(f"{self.anthropic_url}/reset", method="POST", data=b"")
        urllib.request.urlopen(request, timeout=5).read()

    def model_overrides(self, judge: bool = True) -> list[str]:
        """Overrides that point the fake model options (and judge) at this server."""
        out = [f"model.base_url={self.openai_url}"]
        if judge:
            out.append(f"judge.base_url={self.openai_url}")
        return out


def start_fake_server(*args: str) -> FakeServer:
    """The fake provider in a process of its own (a thread of the pytest process would share its
    interpreter lock with the in-process driver and shift the timing the lane tests measure)."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "prefray.fakellm", "--port", str(port), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.time() + 60     # a busy machine can take long to start a Python process
    while time.time() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return FakeServer(port, process)
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("fake server did not start")


@pytest.fixture(scope="session")
def session_fake_server():
    """The session's plain fake provider (no limits, no faults), shared by every test."""
    server = start_fake_server()
    yield server
    server.process.kill()
    server.process.wait()


@pytest.fixture
def fake_server(session_fake_server):
    """The session's plain fake provider, its counts and recorded requests reset for this test."""
    session_fake_server.reset()
    return session_fake_server


@pytest.fixture
def make_fake_server():
    """Factory for fake servers with options (e.g. '--rpm', '60'); all are stopped afterwards."""
    servers = []

    def make(*args: str) -> FakeServer:
        server = start_fake_server(*args)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.process.kill()
        server.process.wait()


def launch(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI (`python -m prefray.launch ...`) and return the finished process."""
    return subprocess.run([sys.executable, "-m", "prefray.launch", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, **(env or {})})


def run_together(*argvs: list[str], env: dict | None = None, timeout: float = 120) -> list[subprocess.CompletedProcess]:
    """Processes that only start and refuse, run at once rather than one after the other (each
    pays for a Python start and its imports: on two cores, together they take about half as long)."""
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env={**os.environ, **(env or {})}) for argv in argvs]
    done = []
    try:
        for argv, proc in zip(argvs, procs):
            out, err = proc.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


def launch_here(*args: str, env: dict | None = None, timeout: float | None = None,
                forbid_ray: bool = False) -> subprocess.CompletedProcess:
    """`python -m prefray.launch *args`, run in this process (see `command_here`)."""
    return command_here("launch", *args, env=env, forbid_ray=forbid_ray)


def command_here(command: str, *args: str, env: dict | None = None, timeout: float | None = None,
                 forbid_ray: bool = False) -> subprocess.CompletedProcess:
    """`python -m prefray.COMMAND *args` in this process, through the CLIs' one runner
    (`prefray.app.run`: Ctrl-C 130, bad arguments 2; an escaping exception: its traceback and 1),
    its output captured; → a CompletedProcess. `env` sets variables (None: unset). `forbid_ray`: starting
    (or joining) Ray fails the command, for refusals that must come first. `timeout` is pytest-timeout's here.

    What a run leaves behind in the process is undone: the environment, the working directory, the
    interrupt line's run dir, the config-file caches; and the gateway (and served model) actors it
    killed are waited for, since their names are this driver's job's and the next run asks for them."""
    from prefray import app
    from prefray.engine.flow.exits import set_current_run

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    for name, value in (env or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    os.chdir(ROOT)
    try:
        with redirect_stdout(out), redirect_stderr(err), (ray_forbidden() if forbid_ray else _nothing()):
            try:
                code = app.run(command, list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:  # noqa: BLE001 - what the interpreter does with it
                traceback.print_exc()
                code = 1
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        set_current_run(None)
        forget_config_files()
        wait_for_launch_actors()
    return subprocess.CompletedProcess([f"prefray.{command}", *args], code, out.getvalue(), err.getvalue())


def script_here(script: str, *argv: str) -> subprocess.CompletedProcess:
    """`python -c SCRIPT *argv` in this process, a driver of the session's cluster as an in-process
    launch is (a script joins Ray only if it has not been joined); its output captured."""
    from prefray.engine.flow.session import start_ray

    start_ray()
    out, err = io.StringIO(), io.StringIO()
    saved_argv = sys.argv
    sys.argv = ["-c", *argv]
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                exec(compile(script, "<script>", "exec"), {"__name__": "__main__"})  # noqa: S102 - the test's own
                code = 0
            except Exception:  # noqa: BLE001 - what the interpreter does with it
                traceback.print_exc()
                code = 1
    finally:
        sys.argv = saved_argv
        wait_for_launch_actors()
    return subprocess.CompletedProcess(["-c", *argv], code, out.getvalue(), err.getvalue())


@contextmanager
def _nothing():
    yield


@contextmanager
def ray_forbidden():
    """`ray.init` fails and Ray reads as not started (even if this process joined it before)."""
    import ray

    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started before the refusal")

    saved = ray.init, ray.is_initialized
    ray.init, ray.is_initialized = refuse, lambda: False
    try:
        yield
    finally:
        ray.init, ray.is_initialized = saved


def refused_here(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """A launch expected to stop before Ray, in this process (see `launch_here`)."""
    return launch_here(*args, env=env, forbid_ray=True)


_config_files_seen: list = []


def _config_files() -> tuple:
    """What the config tree holds now: each file's path, size and modification time."""
    from prefray.app.compose import conf_dir

    return tuple(sorted((str(path), stat.st_size, stat.st_mtime_ns)
                        for path in conf_dir().rglob("*") if path.is_file() for stat in [path.stat()]))


def forget_config_files() -> None:
    """Config files are read once per process (cached functions of prefray.engine.config and
    prefray.app); a test may rewrite one between two runs. The caches are kept while the config
    tree is unchanged: reading ~100 YAML files again costs every launch a second or more."""
    now = _config_files()
    if _config_files_seen == [now]:
        return
    _config_files_seen[:] = [now]
    for name, module in list(sys.modules.items()):
        if name.startswith(("prefray.engine.config", "prefray.app")):
            for value in list(vars(module).values()):
                if callable(getattr(value, "cache_clear", None)) and getattr(value, "__module__", None) == name:
                    value.cache_clear()


def wait_for_launch_actors(timeout: float = 30) -> None:
    """Until no gateway or served-model actor of this driver's job is alive (a killed actor's name
    is released a moment after `ray.kill`; the next launch must not be handed the dying one)."""
    import ray

    if not ray.is_initialized():
        return
    job = ray.get_runtime_context().get_job_id()
    deadline = time.time() + timeout
    while time.time() < deadline:
        names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
        if not any(n.startswith(("gateway-", "local-server-")) and job in n for n in names):
            return
        time.sleep(0.05)


@pytest.fixture
def run_cli(ray_address):
    """`run_cli(*args)` → CompletedProcess; fails the test with the output if it exits with another
    code than `expect_code` (0: every cell complete; 3: finished with failed or skipped units).
    In this process (`launch_here`); `process=True` runs `python -m prefray.launch` instead.
    `run.plots=false` unless `plots=True`: the figures are tested where a test looks at them."""

    def run(*args: str, expect_ok: bool = True, expect_code: int = 0, process: bool = False, plots: bool = False,
            **kwargs) -> subprocess.CompletedProcess:
        if not plots and not any(a.startswith("run.plots=") for a in args):
            args = (*args, "run.plots=false")      # figures are drawn only for a test that looks at them
        done = (launch if process else launch_here)(*args, **kwargs)
        if expect_ok and done.returncode != expect_code:
            pytest.fail(f"launch {' '.join(args)} exited {done.returncode}\n"
                        f"STDOUT:\n{done.stdout}\nSTDERR:\n{done.stderr}")
        return done

    return run
