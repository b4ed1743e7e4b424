"""The stand-ins for a Ray node's two agents on a launch's own node (engine/flow/node_agents.py), and
the raylet's command that runs them (engine/flow/local_node.py). Replies are read with Ray's own
protobuf classes and port files compared with the ones Ray's own `persist_port` writes."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from prefray.engine.calls.gateway import _alive
from prefray.engine.flow import local_node, node_agents

NODE_ID = "ab" * 28


def _start(agent: str, session: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, node_agents.__file__, agent, f"--node-id={NODE_ID}",
                             f"--session-dir={session}", "--node-ip-address=127.0.0.1",
                             "--logging-rotate-bytes=1", *extra], stderr=subprocess.PIPE, text=True)


def _port_file(session: Path, name: str, wait_s: float = 20.0) -> str:
    path = session / f"{name}_{NODE_ID}"
    deadline = time.monotonic() + wait_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} was not written"
        time.sleep(0.02)
    return path.read_text()


def _post(port: int, route: str, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{route}", data=body, method="POST",
                                     headers={"Content-Type": "application/octet-stream"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, b""


def test_the_dashboard_stand_in_writes_the_port_files_ray_s_minimal_agent_writes(tmp_path):
    """The three files, named and written as Ray's `persist_port` names and writes them, each -1."""
    from ray import _raylet

    names = (_raylet.METRICS_AGENT_PORT_NAME, _raylet.METRICS_EXPORT_PORT_NAME,
             _raylet.DASHBOARD_AGENT_LISTEN_PORT_NAME)
    by_ray = tmp_path / "ray"
    by_ray.mkdir()
    for name in names:
        _raylet.persist_port(str(by_ray), NODE_ID, name, -1)
    ours = tmp_path / "ours"
    ours.mkdir()
    agent = _start("dashboard", ours)
    try:
        for name in names:
            assert _port_file(ours, name) == (by_ray / f"{name}_{NODE_ID}").read_text()
        assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in by_ray.iterdir())
        assert agent.poll() is None, "the stand-in must live as long as its raylet"
    finally:
        agent.kill()
        agent.wait()


def test_the_runtime_env_stand_in_refuses_to_build_an_environment_and_has_none(tmp_path):
    """Ray's three requests, read back with Ray's protobuf replies: creating is FAILED with the reason,
    deleting is OK (nothing was made), the list is empty; another route is 404."""
    from ray.core.generated import runtime_env_agent_pb2 as pb

    agent = _start("runtime-env", tmp_path)
    try:
        port = int(_port_file(tmp_path, "runtime_env_agent_port"))
        assert port > 0
        create = pb.GetOrCreateRuntimeEnvRequest(serialized_runtime_env='{"pip": ["x"]}').SerializeToString()
        status, body = _post(port, "/get_or_create_runtime_env", create)
        reply = pb.GetOrCreateRuntimeEnvReply.FromString(body)
        assert status == 200 and reply.status == pb.AGENT_RPC_STATUS_FAILED
        assert reply.error_message == node_agents.REFUSAL and "serves no runtime environments" in reply.error_message
        status, body = _post(port, "/delete_runtime_env_if_possible", b"")
        assert status == 200 and pb.DeleteRuntimeEnvIfPossibleReply.FromString(body).status == pb.AGENT_RPC_STATUS_OK
        status, body = _post(port, "/get_runtime_envs_info", b"")
        info = pb.GetRuntimeEnvsInfoReply.FromString(body)
        assert status == 200 and info.total == 0 and len(info.runtime_env_states) == 0
        assert _post(port, "/anything_else", b"")[0] == 404
    finally:
        agent.kill()
        _, err = agent.communicate()
    assert "/get_or_create_runtime_env answered (refused)" in err


def test_a_stand_in_ends_with_the_process_that_started_it(tmp_path):
    """The raylet is each agent's parent: when it is killed (SIGKILL: nothing is said), so is the agent."""
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, {node_agents.__file__!r}, "runtime-env", "--node-id={NODE_ID}",
                                  "--session-dir={tmp_path}", "--node-ip-address=127.0.0.1"])
        print(child.pid, flush=True)
        time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    _port_file(tmp_path, "runtime_env_agent_port")
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while _alive(child):   # the gateway's own check of a process: gone, or a zombie, is dead
        assert time.monotonic() < deadline, "the stand-in outlived its parent"
        time.sleep(0.05)


def test_a_stand_in_whose_raylet_has_ended_already_exits_at_once(tmp_path):
    """Ray tells its agents the raylet's pid (RAY_RAYLET_PID): a stand-in whose parent is not that
    raylet (it ended, and the stand-in was handed to another parent) exits before writing anything."""
    env = {**os.environ, "RAY_RAYLET_PID": str(os.getpid())}   # this test, not the stand-in's parent
    done = subprocess.run([sys.executable, "-c", f"import subprocess, sys; sys.exit(subprocess.call("
                           f"[sys.executable, {node_agents.__file__!r}, 'dashboard', '--node-id={NODE_ID}', "
                           f"'--session-dir={tmp_path}', '--node-ip-address=127.0.0.1']))"],
                          env=env, timeout=60)
    assert done.returncode == 0
    assert list(tmp_path.iterdir()) == []


def test_the_raylet_s_agent_commands_run_the_stand_ins_with_ray_s_arguments():
    """Only the two agents' scripts are swapped (for node_agents.py and the agent's name); the
    interpreter, its flags and every argument stay, quoting included; other arguments are untouched."""
    session = "/tmp/ray/session a b"
    for option, script, agent in (("--dashboard_agent_command=", "/site/ray/dashboard/agent.py", "dashboard"),
                                  ("--runtime_env_agent_command=", "/site/ray/_private/runtime_env/agent/main.py",
                                   "runtime-env")):
        words = ["/venv/bin/python", "-u", script, f"--node-id={NODE_ID}", f"--session-dir={session}", "--minimal"]
        changed = local_node._stood_in(option + subprocess.list2cmdline(words))
        assert changed.startswith(option)
        assert shlex.split(changed[len(option):]) == ["/venv/bin/python", "-u", node_agents.__file__, agent,
                                                       *words[3:]]
    for untouched in ("--node_id=x", "--python_worker_command=/venv/bin/python /site/ray/dashboard/agent.py",
                      "--dashboard_agent_command=/venv/bin/python /elsewhere/agent.py"):
        assert local_node._stood_in(untouched) == untouched


@pytest.mark.e2e
def test_a_launch_s_own_node_runs_tasks_and_refuses_a_runtime_environment_with_the_reason():
    """On a node started as a launch starts its own (session.start_ray, no RAY_ADDRESS): a plain task
    runs; a task asking for a runtime environment fails at once with the stand-in's reason, rather
    than running without the environment it asked for."""
    script = textwrap.dedent("""
        import ray
        from prefray.engine.flow.session import start_ray

        assert start_ray() is True
        square = ray.remote(lambda x: x * x)
        print("plain", ray.get(square.remote(7)))
        try:
            ray.get(square.options(runtime_env={"env_vars": {"A": "1"}}).remote(7), timeout=60)
            print("ran")
        except Exception as exc:
            print("refused", type(exc).__name__, str(exc).replace(chr(10), " "))
        """)
    with tempfile.TemporaryDirectory(prefix="r") as ray_temp:   # short: Ray's socket paths live under it
        env = {**os.environ, "RAY_ADDRESS": "", "RAY_TMPDIR": ray_temp}
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-2000:]
        lines = done.stdout.splitlines()
        assert "plain 49" in lines, done.stdout
        refused = next(line for line in lines if line.startswith(("refused", "ran")))
        assert refused.startswith("refused RuntimeEnvSetupError") and node_agents.REFUSAL in refused, refused
        logs = next(Path(ray_temp).glob("ray/session_*/logs"))
        assert "stand-in for Ray's runtime-env agent" in (logs / "runtime_env_agent.err").read_text()
        assert "stand-in for Ray's dashboard agent" in (logs / "dashboard_agent.err").read_text()
