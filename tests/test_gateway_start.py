"""A sweep's gateways start before its first batch, each building its lane meanwhile."""

from __future__ import annotations

import json

import pytest

START_SCRIPT = """
import json, sys, time
import ray
from prefray.engine.calls.dispatch import Gateways
from prefray.engine.calls.gateway import NAMESPACE
from prefray.engine.calls.limits import limiter_name
from prefray.engine.types import ModelSpec

url = sys.argv[1]
paced = ModelSpec(name="paced", provider="openai", model_id="paced-model", base_url=url, rpm=600)
served = ModelSpec(name="served", provider="openai", model_id="served-model", base_url=url, serve="fakellm")
gateways = Gateways()
gateways.start([paced, served, paced])
keys = sorted(gateways.handles)
limiter = limiter_name(paced.endpoint_key, "prefray-local")
seen = False
deadline = time.time() + 60
while not seen and time.time() < deadline:
    seen = limiter in [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    time.sleep(0.1)
import asyncio
asyncio.run(gateways.close())
ended = False
deadline = time.time() + 120     # nothing took from it: it still ends once idle (PREFRAY_LIMITER_IDLE_S)
while seen and time.time() < deadline:
    ended = limiter not in [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    if ended:
        break
    time.sleep(0.5)
print(json.dumps({"keys": keys, "limiter": seen, "ended": ended}))
"""


@pytest.mark.e2e
def test_gateways_start_for_every_model_and_build_their_lanes_before_a_batch(ray_address, make_fake_server,
                                                                            monkeypatch):
    """Before any batch: a gateway per model id (the locally served one included, its server
    answering already; the repeated model once), and the rate-limited lane's endpoint limiter
    exists, which only a built lane creates; never taken from, the limiter still ends once idle."""
    from tests.conftest import script_here

    monkeypatch.setenv("PREFRAY_LIMITER_IDLE_S", "2")
    server = make_fake_server()
    done = script_here(START_SCRIPT, server.openai_url)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    endpoint = f"openai|{server.openai_url}|"
    assert out["keys"] == [f"{endpoint}|paced-model#0", f"{endpoint}|served-model#0"]
    assert out["limiter"] is True
    assert out["ended"] is True


def test_a_gateway_process_imports_neither_pandas_nor_pyarrow_dataset():
    """A gateway's process imports the gateway module before its first call (every gateway of every
    launch, on every start): it reads no stored rows, so it leaves out pyarrow.dataset and the
    pandas that imports (~0.3 s of CPU per process); reading shards imports it when it reads."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    script = ("import sys; import prefray.engine.calls.gateway, prefray.engine.calls.providers.openai_chat; "
              "print(sorted(m for m in ('pandas', 'pyarrow.dataset') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _specs(*providers: str):
    from prefray.engine.types import ModelSpec

    return [ModelSpec(name=f"m{i}", provider=p, model_id=f"m{i}") for i, p in enumerate(providers)]


def test_a_launch_s_workers_preload_the_gateway_and_an_adapter_every_model_shares():
    """One provider among the models (evaluated and roles): its adapter is preloaded with the gateway; two: the
    gateway's module alone (a gateway would import the other SDK for nothing)."""
    from prefray.engine.flow.session import worker_modules

    gateway, openai = "prefray.engine.calls.gateway", "prefray.engine.calls.providers.openai_chat"
    anthropic = "prefray.engine.calls.providers.anthropic_messages"
    assert worker_modules(_specs("openai", "openai")) == [gateway, openai]
    assert worker_modules(_specs("anthropic", "anthropic", "anthropic")) == [gateway, anthropic]
    assert worker_modules(_specs("openai", "anthropic")) == [gateway]


PRELOAD_SCRIPT = """
import json, sys
import ray
from prefray.engine.flow.session import start_ray

assert start_ray(["prefray.engine.calls.providers.openai_chat"]) is True   # a cluster of its own

@ray.remote
def imported():
    return "prefray.engine.calls.providers.openai_chat" in sys.modules

print(json.dumps(ray.get(imported.remote())))
"""


@pytest.mark.e2e
def test_a_launch_s_own_cluster_starts_its_workers_with_the_modules_named():
    """A cluster start_ray starts (no RAY_ADDRESS) gives its workers the modules to import before any
    work: a task that imports nothing finds the adapter imported."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    from tests.conftest import ROOT

    ray_temp = tempfile.mkdtemp(prefix="r")    # short: Ray's socket paths live under it
    try:
        done = subprocess.run([sys.executable, "-c", PRELOAD_SCRIPT], capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "RAY_ADDRESS": "", "RAY_TMPDIR": ray_temp}, timeout=300)
    finally:
        shutil.rmtree(ray_temp, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "true"
