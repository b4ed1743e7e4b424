"""Where a shard's requests go: the gateways (Ray actors) of each model, or any other `Dispatcher`
(the dry run's simulation, flow/dryrun.py). Each offers `run_batch(spec, requests)` and `close()`,
so the job runner does not care which.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from prefray.engine.calls.gateway import get_gateway, lane_processes
from prefray.engine.rundir.layout import RunDir
from prefray.engine.types import CallResult, ChatRequest, ModelSpec

# The job and stage of the batch being sent ("<job key>\x1f<stage>", flow/progress.py's call_tag),
# set by the runner where the batch is handed to a gateway, which counts finished calls per tag.
CALL_TAG: ContextVar[str | None] = ContextVar("prefray_call_tag", default=None)
# The critical-path rank of that stage (flow/critical.py): a lane serves higher ranks first.
CALL_RANK: ContextVar[int] = ContextVar("prefray_call_rank", default=0)

log = logging.getLogger(__name__)


class Dispatcher(Protocol):
    async def run_batch(self, spec: ModelSpec, requests: list[ChatRequest]) -> list[CallResult]: ...

    async def close(self) -> None: ...


@dataclass
class Gateways:
    """The gateway actors of each model id on an endpoint and key (`lane_processes` of them, created
    on first use, or up front by `start`), plus locally served endpoints. A batch goes to the
    model's gateway with the fewest calls outstanding. `niceness`: per (endpoint key, model id), the
    niceness of that lane's gateway processes (flow/critical.py; 0 if not named)."""

    budget: Any = None
    run_dir: RunDir | None = None   # where gateways keep their ledger of tries sent (engine/rundir/paid.py)
    replay: Any = None            # answers a killed launch received but never stored (engine/rundir/journal.py)
    handles: dict[str, Any] = field(default_factory=dict)    # by gateway key and process number
    outstanding: dict[str, int] = field(default_factory=dict)   # calls sent and not answered, by the same
    servers: dict[tuple[str, int], Any] = field(default_factory=dict)
    ready: dict[tuple[str, int], asyncio.Future] = field(default_factory=dict)
    niceness: dict[tuple[str, str], int] = field(default_factory=dict)

    async def _served(self, spec: ModelSpec) -> ModelSpec:
        """Start a locally served model's server once per run; the spec as this run reaches it."""
        from prefray.engine.calls.gateway import on_this_node
        from prefray.engine.calls.local_servers import get_local_server, host_port, port_answers, served_spec

        address = host_port(spec.base_url)
        if address not in self.ready and address[1] and port_answers(*address):
            # something answers on the explicit port already: it is reused as it is (what the server's
            # actor would find), so no actor is started to hold nothing
            self.ready[address] = asyncio.get_running_loop().create_future()
            self.ready[address].set_result(spec.base_url)
        if address not in self.ready:
            server = self.servers[address] = get_local_server(spec.serve, spec.base_url, on_this_node())
            self.ready[address] = asyncio.ensure_future(server.ensure.remote())
        return served_spec(spec, await self.ready[address])

    async def for_model(self, spec: ModelSpec) -> Any:
        return self.handles[self._least_busy(spec)]

    def _least_busy(self, spec: ModelSpec) -> str:
        """The key of this model's gateway with the fewest calls outstanding."""
        return min(self._lane(spec), key=lambda key: self.outstanding.get(key, 0))

    def _lane(self, spec: ModelSpec) -> list[str]:
        """The keys of this model's gateways, one per process of its lane (each created if new)."""
        return [self._gateway(spec, process) for process in range(lane_processes(spec))]

    def _gateway(self, spec: ModelSpec, process: int = 0) -> str:
        key = f"{spec.gateway_key}#{process}"
        if key not in self.handles:
            api_key = os.environ.get(spec.api_key_env, "") if spec.api_key_env else "prefray-local"
            self.handles[key] = get_gateway(spec, api_key, process,
                                            self.niceness.get((spec.endpoint_key, spec.model_id), 0))
        return key

    def start(self, specs: Iterable[ModelSpec]) -> None:
        """Create the gateways of these models now (interactive tier; a locally served model only if
        its server answers already), each building its lane in the background (`Gateway.prepare`:
        the SDK client, the endpoint's limiter), so no stage's first calls (a judge's) wait for an
        actor's process, imports or client to start. The driver does not wait for any of it."""
        started: set[str] = set()
        for spec in specs:
            if spec.tier != "interactive" or spec.gateway_key in started or (spec.serve and not _answering(spec)):
                continue
            started.add(spec.gateway_key)
            for key in self._lane(spec):
                self.handles[key].prepare.remote(spec)

    async def run_batch(self, spec: ModelSpec, requests: list[ChatRequest]) -> list[CallResult]:
        """Send one batch. A gateway that dies is restarted by Ray and the batch is sent again to
        the new one (actor max_restarts / max_task_retries), which takes the answers its earlier life
        journaled for this batch (by the batch's token) and sends only the rest."""
        if spec.serve:
            spec = await self._served(spec)
        replayed = [self.replay.take(spec, r) if self.replay is not None else None for r in requests]
        missing = [r for r, answer in zip(requests, replayed) if answer is None]
        sent: list[CallResult] = []
        if missing:
            key = self._least_busy(spec)
            self.outstanding[key] = self.outstanding.get(key, 0) + len(missing)
            try:
                sent = list(await self.handles[key].run_batch.remote(spec, missing, self.budget, self.run_dir,
                                                                     CALL_TAG.get(), secrets.token_hex(8),
                                                                     CALL_RANK.get()))
            finally:
                self.outstanding[key] -= len(missing)
        answers = iter(sent)
        return [answer if answer is not None else next(answers) for answer in replayed]

    async def close(self) -> None:
        import ray

        for handle in self.handles.values():
            try:
                await keep_logs(await _quietly(handle.close.remote()), handle.read_log.remote)
            except Exception as exc:  # noqa: BLE001 - the run's answers are stored; say which record is missing
                log.warning(f"prefray: a gateway's ledger or journal was not copied to this node: {exc}")
            ray.kill(handle)
        for server in self.servers.values():
            ray.kill(server)  # ends the process and the server in it (llama.cpp's own stop can hang)
        self.handles.clear()
        self.outstanding.clear()
        self.servers.clear()
        self.ready.clear()


def _answering(spec: ModelSpec) -> bool:
    """A locally served model's server answers on its configured port already (it is then used as
    it is, `Gateways._served`), so its gateway's key is known before the run."""
    from prefray.engine.calls.local_servers import host_port, port_answers

    try:
        address = host_port(spec.base_url)
    except ValueError:
        return False
    return bool(address[1]) and port_answers(*address)


async def _quietly(ref: Any) -> Any:
    try:
        return await ref
    except Exception:  # noqa: BLE001 - an actor that is already gone needs no closing
        return None


LOG_PIECE_BYTES = 4 * 2**20   # what one fetch of a closed gateway's log carries (memory stays flat)


async def keep_logs(logs: list[tuple[RunDir, str, int]] | None,
                    read: Callable[[RunDir, str, int, int], Awaitable[bytes]]) -> None:
    """Copy a closed gateway's ledger and journal into the run dir on this (the driver's) node
    where the copy here is missing or shorter (a gateway on another node wrote them there),
    fetching each with `read(run dir, path inside it, offset, length)` a piece at a time."""
    for run_dir, relative, size in logs or []:
        path = run_dir / relative
        if path.exists() and path.stat().st_size >= size:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(temp, "wb") as sink:
                while sink.tell() < size:
                    piece = await read(run_dir, relative, sink.tell(), min(LOG_PIECE_BYTES, size - sink.tell()))
                    if not piece:
                        raise OSError(f"{relative} ended at {sink.tell()} of {size} bytes")
                    sink.write(piece)
            os.replace(temp, path)
        finally:
            temp.unlink(missing_ok=True)
