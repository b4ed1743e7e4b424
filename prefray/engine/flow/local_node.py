"""A launch's own Ray node, started lean: what `ray.init` starts for one node that no run uses is
left out, and what it waits for is waited for more closely.

`ray.init` takes no option for any of this, so Ray's private hooks are replaced for the length of
the call (Ray 2.60, pinned in pyproject.toml; tests/test_launch_exit.py checks the node a launch
starts). A cluster the launch joins (RAY_ADDRESS, Ray Jobs, KubeRay) is never touched.

Left out (each measured on two cores; docs/performance.md):
- the autoscaler monitor (one node: nothing to scale) and the log monitor (worker logs go to files,
  `log_to_driver=False`): `RayParams(no_monitor, include_log_monitor)`;
- the API server Ray starts even with `include_dashboard=False`, then serving usage statistics
  only; the head waited ~1 s for its address before starting the raylet (`Node.start_api_server`);
- Ray's two node agents, which the raylet starts beside itself and waits for (their ports) before it
  registers: each imports Ray (~1 s of CPU apiece, on two cores beside the driver and the first
  workers) for services no launch's own node uses (metrics, HTTP, job submission; runtime
  environments, which prefray's workers never ask for). The raylet runs node_agents.py's stand-ins
  instead (standard library only: the ports Ray's minimal agent writes, -1; a runtime env agent
  that refuses to build an environment, with the reason), by its command line
  (`services.start_ray_process` for the raylet). Binding no fixed port, a second node on the machine
  no longer slows a launch's start (Ray's agent retried 52365 ~3.3 s while another node held it).
Waited for more closely: the raylet's registration. Ray asks for the node once a second, so a raylet
that registers at 1.2 s is seen at ~2.1 s; this asks every 20 ms first (`services.get_node`).
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REGISTERED_POLL_S = 0.02
REGISTERED_WAIT_S = 30.0   # Ray's own wait for a raylet (Node.__init__'s raylet_start_wait_time_s)


@contextmanager
def lean_local_node(local: bool) -> Iterator[None]:
    """Around `ray.init` when it starts a cluster of the launch's own (`local`); nothing otherwise."""
    if not local:
        yield
        return
    from ray._private import node, parameter, services

    hooks = [(parameter, "RayParams", _without_monitors(parameter.RayParams)),
             (node.Node, "start_api_server", _no_api_server),
             (services, "start_ray_process", _agents_stood_in(services.start_ray_process)),
             (services, "get_node", _once_registered(services.get_node))]
    plain = [(owner, name, getattr(owner, name)) for owner, name, _ in hooks]
    for owner, name, replacement in hooks:
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for owner, name, original in plain:
            setattr(owner, name, original)


def _without_monitors(params: Any) -> Any:
    def lean(*args: Any, **kwargs: Any) -> Any:
        kwargs.update(no_monitor=True, include_log_monitor=False)
        return params(*args, **kwargs)
    return lean


def _no_api_server(self: Any, **_: Any) -> None:
    return None


AGENT_SCRIPTS = {"dashboard/agent.py": "dashboard",                  # Ray's agents' scripts, under ray/
                 "_private/runtime_env/agent/main.py": "runtime-env"}
AGENT_OPTIONS = ("--dashboard_agent_command=", "--runtime_env_agent_command=")
STAND_INS = str(Path(__file__).with_name("node_agents.py"))   # a script the raylet runs: not imported here


def _agents_stood_in(start_ray_process: Any) -> Any:
    """Ray's `start_ray_process`, with the raylet's two agents' commands running node_agents.py in
    place of Ray's scripts (the same interpreter and arguments)."""
    def start_with_agents_stood_in(command: list[str], process_type: str, *args: Any, **kwargs: Any) -> Any:
        from ray._private import ray_constants

        if process_type == ray_constants.PROCESS_TYPE_RAYLET:
            command = [_stood_in(argument) for argument in command]
        return start_ray_process(command, process_type, *args, **kwargs)
    return start_with_agents_stood_in


def _stood_in(argument: str) -> str:
    option = next((option for option in AGENT_OPTIONS if argument.startswith(option)), None)
    if option is None:
        return argument
    words = shlex.split(argument[len(option):])
    for i, word in enumerate(words):
        agent = next((name for tail, name in AGENT_SCRIPTS.items() if word.endswith(tail)), None)
        if agent is not None:
            words[i:i + 1] = [STAND_INS, agent]
            return option + subprocess.list2cmdline(words)
    return argument


def _once_registered(get_node: Any) -> Any:
    """Ray's `get_node`, asked once the GCS lists the node (or after REGISTERED_WAIT_S, or if the
    GCS cannot be asked: then Ray's own wait decides)."""
    def get_node_once_registered(gcs_address: str, node_id: str) -> Any:
        try:
            _wait_registered(gcs_address, node_id)
        except Exception:  # noqa: BLE001 - a shortcut only: Ray's get_node below waits as before
            pass
        return get_node(gcs_address, node_id)
    return get_node_once_registered


def _wait_registered(gcs_address: str, node_id: str) -> bool:
    """Whether the GCS listed the node (hex id) within REGISTERED_WAIT_S, asking every REGISTERED_POLL_S."""
    import ray

    client = ray._raylet.GcsClient(address=gcs_address)
    deadline = time.monotonic() + REGISTERED_WAIT_S
    while time.monotonic() < deadline:
        if any(found.hex() == node_id for found in client.get_all_node_info(timeout=5)):
            return True
        time.sleep(REGISTERED_POLL_S)
    return False
