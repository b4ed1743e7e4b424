"""Shared test fixtures: one real local Ray cluster per session, real fake-provider servers.

Every CLI run in the tests goes through `python -m prefray.launch` in a subprocess that joins the
session's cluster through RAY_ADDRESS, so each run costs a connection, not a cluster start.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def ray_address(tmp_path_factory) -> str:
    """A real Ray head node on loopback for the whole session, stopped (only it) at the end."""
    port = free_port()
    temp = tmp_path_factory.mktemp("ray")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    ray_cli = str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen([ray_cli, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
                             "--num-cpus=2", "--include-dashboard=false", f"--temp-dir={temp}",
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
    os.killpg(head.pid, signal.SIGTERM)
    try:
        head.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)


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
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "prefray.fakellm", "--port", str(port), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.time() + 20
    while time.time() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return FakeServer(port, process)
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("fake server did not start")


@pytest.fixture
def fake_server():
    """A fresh fake provider server (plain: no limits, no faults)."""
    server = start_fake_server()
    yield server
    server.process.kill()
    server.process.wait()


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


@pytest.fixture
def run_cli(ray_address):
    """`run_cli(*args)` → CompletedProcess; fails the test with the output if it exits with another
    code than `expect_code` (0: every cell complete; 3: finished with failed or skipped units)."""

    def run(*args: str, expect_ok: bool = True, expect_code: int = 0, **kwargs) -> subprocess.CompletedProcess:
        done = launch(*args, **kwargs)
        if expect_ok and done.returncode != expect_code:
            pytest.fail(f"launch {' '.join(args)} exited {done.returncode}\nSTDOUT:\n{done.stdout}\nSTDERR:\n{done.stderr}")
        return done

    return run
