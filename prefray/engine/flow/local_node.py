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
- the dashboard agent's metrics, jobs, logs and HTTP server: it runs in the minimal mode Ray gives an
  install without the dashboard's packages (`utils.get_dashboard_dependency_error`), so it tells the
  raylet at once there is no metrics agent (the raylet waited ~1.2 s for its port) and binds no
  fixed port (52365, whose holder made a second node's agent retry ~3.3 s). Without a dashboard its
  event module asks for one's address once a second (a line in the node's own agent log).
Waited for more closely: the raylet's registration. Ray asks for the node once a second, so a raylet
that registers at 1.2 s is seen at ~2.1 s; this asks every 20 ms first (`services.get_node`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

REGISTERED_POLL_S = 0.02
REGISTERED_WAIT_S = 30.0   # Ray's own wait for a raylet (Node.__init__'s raylet_start_wait_time_s)


@contextmanager
def lean_local_node(local: bool) -> Iterator[None]:
    """Around `ray.init` when it starts a cluster of the launch's own (`local`); nothing otherwise."""
    if not local:
        yield
        return
    from ray._private import node, parameter, services, utils

    hooks = [(parameter, "RayParams", _without_monitors(parameter.RayParams)),
             (node.Node, "start_api_server", _no_api_server),
             (utils, "get_dashboard_dependency_error", _minimal_agent),
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


def _minimal_agent() -> ImportError:
    return ImportError("a launch's own node: its dashboard agent runs minimal")


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
