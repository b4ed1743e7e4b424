"""Beyond one launch on one machine: own ports for served models, Ray Jobs, keys, several nodes.

Tests marked `cluster` start Ray clusters of their own on loopback (beside the session's shared
head), with the job server or with two nodes: `python -m pytest -m cluster` runs just them.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from prefray.engine.calls.limits import limiter_name
from prefray.engine.calls.local_servers import host_port, start_local_server, with_port
from prefray.engine.types import ModelSpec
from tests.conftest import ROOT, free_port

RAY_CLI = str(Path(sys.executable).with_name("ray"))

TINY = ["benchmark=benchpres", "limit=1", "run.progress=false"]


def metric_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def answers(url: str) -> bool:
    host, port = host_port(url)
    with socket.socket() as sock:
        return sock.connect_ex((host, port)) == 0


def test_port_zero_binds_a_free_port_per_server():
    async def two_servers():
        first, first_url = await start_local_server("fakellm", "http://127.0.0.1:0/v1")
        second, second_url = await start_local_server("fakellm", "http://127.0.0.1:0/v1")
        try:
            return first_url, second_url, answers(first_url), answers(second_url)
        finally:
            await first.stop()
            await second.stop()

    first_url, second_url, first_up, second_up = asyncio.run(two_servers())
    assert first_url != second_url and first_up and second_up
    assert host_port(first_url)[1] > 0 and first_url.endswith("/v1")
    assert with_port("http://127.0.0.1:0", 4321) == "http://127.0.0.1:4321"


def node_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of a test cluster's nodes: this Python first on PATH, no session cluster address."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["RAY_AUTH_MODE"] = "disabled"
    return {**env, **(extra or {})}


def wait_for_port(port: int, process: subprocess.Popen, what: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.time() > deadline or process.poll() is not None:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.3)


def stop(process: subprocess.Popen) -> None:
    """Kill the process group at once: a `ray start --block` takes ~30 s to stop gracefully, and
    nothing of a test's cluster is kept."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@contextmanager
def ray_head(temp: str, dashboard: bool = False, env: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """A Ray head of its own on loopback, every port chosen free; stopped (only it) at the end."""
    port, dash = free_port(), free_port()
    args = [RAY_CLI, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
            "--num-cpus=1", f"--temp-dir={temp}", "--disable-usage-stats",
            f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}"]
    args += (["--dashboard-host=127.0.0.1", f"--dashboard-port={dash}"] if dashboard
             else ["--include-dashboard=false"])
    head = subprocess.Popen(args, env=node_env(env), cwd=temp, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, head, "ray head")
        if dashboard:
            wait_for_port(dash, head, "ray job server")
        yield {"gcs": f"127.0.0.1:{port}", "dashboard": f"http://127.0.0.1:{dash}", "temp": temp}
    finally:
        stop(head)


@pytest.fixture
def short_temp() -> Iterator[str]:
    """Ray's socket paths must stay short: a temp dir right under /tmp."""
    temp = tempfile.mkdtemp(prefix="pfr", dir="/tmp")
    yield temp
    shutil.rmtree(temp, ignore_errors=True)


KEY = "sk-prefray-" + secrets.token_hex(16)  # a fake key made here, so no file holds it beforehand


def ray_cli(*args: str, timeout: float = 120) -> str:
    done = subprocess.run([RAY_CLI, *args], env=node_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"ray {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout + done.stderr


def files_containing(root: str, needle: str) -> list[str]:
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            try:
                with open(path, "rb") as handle:
                    if needle.encode() in handle.read():
                        found.append(path)
            except OSError:
                continue
    return found


@pytest.mark.e2e
@pytest.mark.cluster
def test_ray_job_submit_runs_a_sweep_and_keeps_keys_out_of_ray(fake_server, short_temp, tmp_path):
    """A sweep submitted with jobs/submit.sh to a head with the job server; the API key lives only in
    the nodes' environment and never shows in Ray's state API, job info or session files."""
    run = tmp_path / "jobrun"
    keyed = ["model.api_key_env=PREFRAY_TEST_KEY", "judge.api_key_env=PREFRAY_TEST_KEY"]
    with ray_head(short_temp, dashboard=True, env={"PREFRAY_TEST_KEY": KEY}) as head:
        done = subprocess.run(["bash", "jobs/submit.sh", "--address", head["dashboard"], "model=fake", "judge=fake",
                               *TINY, *fake_server.model_overrides(), *keyed, f"run.dir={run}"],
                              cwd=ROOT, env=node_env({"RAY_ADDRESS": "127.0.0.1:1"}),  # --address wins over it
                              capture_output=True, text=True, timeout=500)
        # exit 0 also means the driver found the key: a missing key env var stops the launch (exit 2)
        assert done.returncode == 0, done.stdout + done.stderr
        api = ["--address", head["dashboard"]]
        seen = {"submit output": done.stdout + done.stderr,
                "ray list actors --detail": ray_cli("list", "actors", "--detail", "--limit", "1000", *api),
                "ray list tasks --detail": ray_cli("list", "tasks", "--detail", "--limit", "1000", *api),
                "ray job list": ray_cli("job", "list", *api)}
        assert "Gateway" in seen["ray list actors --detail"]  # the state API did list the sweep's actors
    assert not [where for where, text in seen.items() if KEY in text]
    assert not files_containing(short_temp, KEY)
    assert f"run.dir={run}" in done.stdout
    rows = metric_rows(run)
    assert rows and any(r.get("benchmark") == "benchpres" for r in rows), rows
    by_model = fake_server.stats()["by_model"]  # the job's calls reached the server the test started
    assert by_model.get("fake-model", 0) > 0 and by_model.get("fake-judge", 0) > 0, by_model


@pytest.mark.e2e
def test_kuberay_manifest_runs_a_sweep_the_cli_accepts(tmp_path):
    """No Kubernetes here: the RayJob is checked for shape, and its entrypoint's sweep goes through
    the CLI's own config composition (--cfg: no keys needed)."""
    import re
    import shlex

    import yaml

    text = (ROOT / "jobs" / "rayjob.yaml").read_text()
    job = yaml.safe_load(text)
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    cluster = job["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    workers = cluster["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert head["image"] == workers["image"] == job["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["image"]
    secrets_on_head = {s["secretRef"]["name"] for s in head["envFrom"]}
    assert "prefray-api-keys" in secrets_on_head and "envFrom" not in workers  # keys only where the driver runs
    results = next(e["value"] for e in head["env"] if e["name"] == "PREFRAY_RESULTS")
    assert results.startswith("s3://")

    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:2] == ["bash", "-c"]
    commands = [shlex.split(c) for c in argv[2].split(";")]
    launch = next(c for c in commands if c[:3] == ["python", "-m", "prefray.launch"])
    run_dir = next(a.split("=", 1)[1] for a in launch if a.startswith("run.dir="))
    assert run_dir == "$PREFRAY_RESULTS"                  # results straight to object storage

    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = subprocess.run([sys.executable, "-m", "prefray.launch", "--cfg", *launch[3:]], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    needed = set(re.findall(r"^\s*api_key_env: (\w+)$", done.stdout, re.M)) - {"null"}
    in_secret = set(re.findall(r"--from-literal=(\w+)=", text))
    assert needed and needed <= in_secret, (needed, in_secret)


@contextmanager
def ray_worker(gcs: str, temp: str) -> Iterator[None]:
    """A second Ray node on this machine, joined to `gcs`; stopped (only it) at the end."""
    worker = subprocess.Popen([RAY_CLI, "start", "--block", f"--address={gcs}", "--node-ip-address=127.0.0.1",
                               "--num-cpus=1", f"--dashboard-agent-listen-port={free_port()}",
                               f"--temp-dir={temp}", "--disable-usage-stats"],
                              env=node_env(), cwd=temp, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        stop(worker)


def alive_nodes(api: str) -> list[str]:
    from ray.util.state import list_nodes

    return [n.node_id for n in list_nodes(address=api, filters=[("state", "=", "ALIVE")])]


@pytest.mark.e2e
@pytest.mark.cluster
def test_two_node_cluster_runs_a_sweep_with_served_models_on_the_driver_node(fake_server, short_temp, tmp_path,
                                                                           monkeypatch):
    """Head + worker on this machine. The model is served by the sweep itself (port 0), so its server
    and gateway stay on the driver's node; the judge is a remote endpoint: its gateway may go anywhere."""
    from ray.util.state import list_actors, list_workers

    run = tmp_path / "two"
    with ray_head(short_temp, dashboard=True) as head, ray_worker(head["gcs"], short_temp):
        monkeypatch.setenv("RAY_API_SERVER_ADDRESS", head["dashboard"])  # over the session's RAY_ADDRESS
        deadline = time.time() + 120
        while len(alive_nodes(head["dashboard"])) < 2:
            assert time.time() < deadline, "the worker node did not join"
            time.sleep(1)
        done = subprocess.run([sys.executable, "-m", "prefray.launch", "model=fake", "judge=fake", *TINY,
                               f"judge.base_url={fake_server.openai_url}", "judge.serve=null", f"run.dir={run}"],
                              cwd=ROOT, env=node_env({"RAY_ADDRESS": head["gcs"]}), capture_output=True, text=True,
                              timeout=500)
        assert done.returncode == 0, done.stdout + done.stderr
        actors = list_actors(address=head["dashboard"], detail=True, limit=1000)
        drivers = list_workers(address=head["dashboard"], detail=True, limit=1000,
                               filters=[("worker_type", "=", "DRIVER")])
        nodes = alive_nodes(head["dashboard"])
    assert len(nodes) == 2 and len(drivers) == 1
    driver_node = drivers[0].node_id
    judge_key = ModelSpec("fake", "openai", "fake-judge", base_url=fake_server.openai_url).endpoint_key
    judge_gateway = f"gateway-{hashlib.sha1(judge_key.encode()).hexdigest()[:12]}-"
    served = [a for a in actors if a.class_name == "LocalServer"
              or (a.class_name == "Gateway" and not a.name.startswith(judge_gateway))]
    remote = [a for a in actors if a.class_name == "Gateway" and a.name.startswith(judge_gateway)]
    assert len(served) == 2 and len(remote) == 1, [(a.class_name, a.name) for a in actors]
    assert {a.node_id for a in served} == {driver_node}
    assert remote[0].node_id in nodes  # either node will do
    assert metric_rows(run)
    by_model = fake_server.stats()["by_model"]  # only the judge goes to the test's server
    assert by_model.get("fake-judge", 0) > 0 and by_model.get("fake-model", 0) == 0, by_model


def limiter_alive(name: str) -> bool:
    import ray

    try:
        ray.get_actor(name, namespace="prefray")
        return True
    except ValueError:
        return False


@pytest.mark.e2e
def test_two_launches_at_once_serve_their_own_model_and_share_one_limiter_that_outlives_them(
        ray_address, make_fake_server, tmp_path):
    """Two sweeps on one cluster. Each starts the fake model's server itself (model=fake: base_url
    port 0); on a shared fixed port, the first to finish would take the other's server down with it.
    Their judge is one endpoint and key: its gateways take from one detached limiter, so together
    they stay under the server's RPM (zero 429s; with a limiter each, this setup gets 429s); the
    limiter survives both drivers and ends once idle."""
    import ray

    rpm = 240
    server = make_fake_server("--rpm", str(rpm), "--limit-models", "fake-judge")
    runs = [tmp_path / "a", tmp_path / "b"]
    env = {**os.environ, "PREFRAY_LIMITER_IDLE_S": "20"}
    name = limiter_name(ModelSpec("fake", "openai", "fake-judge", base_url=server.openai_url).endpoint_key,
                        "prefray-local")
    ray.init(address=ray_address, namespace="prefray-test-limiter", log_to_driver=False)
    try:
        procs = [subprocess.Popen([sys.executable, "-m", "prefray.launch", "model=fake", "judge=fake", *TINY,
                                   "run.cache=false", "run.plots=false", f"judge.base_url={server.openai_url}",
                                   "judge.serve=null", f"judge.rpm={rpm}", f"run.dir={run}", f"run.seed={i}"],
                                  cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for i, run in enumerate(runs)]
        outputs = [p.communicate(timeout=500)[0] for p in procs]
        survived = limiter_alive(name)           # looked at as soon as both drivers are gone
        deadline = time.time() + 120
        while limiter_alive(name) and time.time() < deadline:
            time.sleep(0.5)
        ended = not limiter_alive(name)
    finally:
        ray.shutdown()
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out
    assert (survived, ended) == (True, True)
    for run in runs:
        assert metric_rows(run), f"no metrics in {run}"
        stored = ds.dataset(run / "shards", format="parquet").to_table(columns=["stage", "status", "cause"]).to_pylist()
        assert {"generate", "judge"} <= {r["stage"] for r in stored}
        assert all(r["status"] == "ok" for r in stored), [r for r in stored if r["status"] != "ok"][:3]
    stats = server.stats()
    # the models' calls went to each launch's own server; the judges' to the shared one, paced
    assert stats["by_model"].get("fake-model", 0) == 0 and stats["by_model"]["fake-judge"] >= 2 * 3 * 4, stats
    assert stats["rate_limited"] == 0, stats
