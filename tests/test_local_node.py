"""A launch's own Ray node (engine/flow/local_node.py): its registration is waited for by asking the
GCS, and Ray's own lookup of the node comes after it."""

from __future__ import annotations

import pytest


@pytest.mark.e2e
def test_ray_s_node_lookup_runs_once_the_gcs_lists_the_node(ray_address, monkeypatch):
    """Against a running cluster: the GCS lists its node (and not a made-up one, within the wait);
    the lookup Ray's start makes is then called once, and what it returns is returned."""
    import ray

    from prefray.engine.flow import local_node
    from prefray.engine.flow.session import start_ray

    start_ray()
    node_id = ray.get_runtime_context().get_node_id()
    assert local_node._wait_registered(ray_address, node_id) is True
    monkeypatch.setattr(local_node, "REGISTERED_WAIT_S", 0.3)
    assert local_node._wait_registered(ray_address, "ab" * 28) is False
    asked = []

    def lookup(gcs_address: str, node: str) -> dict:
        asked.append((gcs_address, node))
        return {"node_id": node}

    found = local_node._once_registered(lookup)(ray_address, node_id)
    assert found == {"node_id": node_id}
    assert asked == [(ray_address, node_id)]


def test_a_gcs_that_cannot_be_asked_leaves_the_lookup_to_ray(monkeypatch):
    """When the GCS cannot be asked (here: the client fails), Ray's own lookup runs, as without the wait."""
    from prefray.engine.flow import local_node

    def fails(gcs_address: str, node_id: str) -> None:
        raise ConnectionError("no GCS")

    monkeypatch.setattr(local_node, "_wait_registered", fails)
    asked = []
    assert local_node._once_registered(lambda *args: asked.append(args) or "info")("127.0.0.1:1", "ab") == "info"
    assert asked == [("127.0.0.1:1", "ab")]


def test_the_runtime_env_agent_s_port_is_chosen_above_the_ephemeral_range(tmp_path, monkeypatch):
    """A port the kernel never gives a socket that asks for any port (above ip_local_port_range),
    free when chosen; none when the range reaches the last port or cannot be read (Ray's own wait)."""
    import socket

    from prefray.engine.flow import local_node

    ranges = tmp_path / "ip_local_port_range"
    monkeypatch.setattr(local_node, "EPHEMERAL_RANGE", str(ranges))
    ranges.write_text("32768\t60999\n")
    chosen = {local_node._port_no_socket_is_given() for _ in range(5)}
    assert all(port is not None and 60999 < port <= 65535 for port in chosen), chosen
    with socket.socket() as probe:   # free: it can be bound
        probe.bind(("", chosen.pop()))
    ranges.write_text("1024\t65535\n")
    assert local_node._port_no_socket_is_given() is None
    ranges.unlink()
    assert local_node._port_no_socket_is_given() is None


def test_a_port_already_taken_above_the_range_is_not_chosen(tmp_path, monkeypatch):
    """With only the last port above the range, and it held by a listening socket: none is chosen."""
    import socket

    from prefray.engine.flow import local_node

    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("1024 65534\n")
    monkeypatch.setattr(local_node, "EPHEMERAL_RANGE", str(ranges))
    with socket.socket() as held:
        try:
            held.bind(("", 65535))
            held.listen()
        except OSError:   # held already by another process: as taken
            pass
        assert local_node._port_no_socket_is_given() is None
