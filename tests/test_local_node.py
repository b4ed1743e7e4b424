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
