"""Stand-ins for the two agents a Ray raylet starts beside itself, run on a launch's own node in place
of Ray's (engine/flow/local_node.py). Standard library only, run as a script by the raylet:

    python node_agents.py dashboard|runtime-env  <the arguments Ray passes its own agent>

Ray's agents each import Ray (~1 s of CPU apiece on two cores, while the raylet waits for their
ports before it registers and the first workers import their gateways), for services a launch's
own node never uses:
- the dashboard agent, already minimal there, only tells the raylet it serves no metrics and no
  HTTP: `dashboard` writes the same three port files (-1: not served) and waits for the raylet;
- the runtime env agent builds a worker's runtime environment (pip, conda, working_dir...); prefray
  starts every worker without one, and the raylet asks the agent only for a non-empty one.
  `runtime-env` binds the agent's port, writes it, and answers the agent's three requests: creating
  an environment is refused with a reason (a task asking for one fails with it rather than running
  without it), deleting one is a no-op (none was made), and the list of environments is empty.
Each ends with the raylet, its parent (Linux's parent-death signal, or a watch of its parent's pid).
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

NOT_SERVED = -1
DASHBOARD_PORTS = ("metrics_agent_port", "metrics_export_port", "dashboard_agent_listen_port")
RUNTIME_ENV_PORT = "runtime_env_agent_port"
PR_SET_PDEATHSIG = 1
PARENT_POLL_S = 1.0
REFUSAL = ("a launch's own Ray node serves no runtime environments: prefray starts its workers "
           "without one (engine/flow/node_agents.py)")

log = logging.getLogger("prefray.node_agents")

# Ray's AgentRpcStatus and the replies' fields (protobuf wire format: a varint `status` as field 1,
# a string `error_message` as field 2); an empty body is a reply with every field at its default.
STATUS_FAILED = 1


def persist_port(session_dir: str, node_id: str, name: str, port: int) -> None:
    """Write a port file as Ray's agents do (`<session dir>/<name>_<node id>`, the port as text),
    whole or not at all: the raylet reads it as soon as it appears."""
    final = Path(session_dir) / f"{name}_{node_id}"
    partial = final.with_name(f".{final.name}.{os.getpid()}")
    partial.write_text(str(port))
    os.replace(partial, final)


def end_with_raylet() -> None:
    """End when the raylet that started this process ends: at once by Linux's parent-death signal,
    or within PARENT_POLL_S where there is none; now if it has ended already."""
    raylet = int(os.environ.get("RAY_RAYLET_PID") or os.getppid())   # Ray tells its agents the raylet's pid
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):   # not Linux
        pass
    if os.getppid() != raylet:
        os._exit(0)
    threading.Thread(target=_exit_once_orphaned, args=(raylet,), name="raylet-watch", daemon=True).start()


def _exit_once_orphaned(raylet: int) -> None:
    while os.getppid() == raylet:
        time.sleep(PARENT_POLL_S)
    os._exit(0)


def failed_reply(message: str) -> bytes:
    text = message.encode()
    return bytes([0x08, STATUS_FAILED, 0x12]) + _varint(len(text)) + text


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


class RuntimeEnvRequests(BaseHTTPRequestHandler):
    """The runtime env agent's three POST routes (Ray's runtime_env/agent/main.py)."""

    replies = {"/get_or_create_runtime_env": failed_reply(REFUSAL),
               "/delete_runtime_env_if_possible": b"",
               "/get_runtime_envs_info": b""}

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        reply = self.replies.get(self.path)
        if reply is None:
            self.send_error(404)
            return
        log.info("%s answered%s", self.path, " (refused)" if reply else "")
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
        log.info(format, *args)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass   # each request is logged once, in do_POST


def serve_runtime_env(args: argparse.Namespace) -> None:
    family, kind, proto, _, address = socket.getaddrinfo(args.node_ip_address, args.runtime_env_agent_port or 0,
                                                         type=socket.SOCK_STREAM)[0]
    server = ThreadingHTTPServer(address, RuntimeEnvRequests, bind_and_activate=False)
    server.socket = socket.socket(family, kind, proto)
    server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.server_bind()
    server.server_activate()
    persist_port(args.session_dir, args.node_id, RUNTIME_ENV_PORT, server.server_address[1])
    server.serve_forever()


def wait_as_dashboard(args: argparse.Namespace) -> None:
    for name in DASHBOARD_PORTS:
        persist_port(args.session_dir, args.node_id, name, NOT_SERVED)
    while True:
        signal.pause()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("agent", choices=["dashboard", "runtime-env"])
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--session-dir", required=True)
    parser.add_argument("--node-ip-address", required=True)
    parser.add_argument("--runtime-env-agent-port", type=int, default=0)
    parser.add_argument("--stderr-filepath", default="")
    args, _ = parser.parse_known_args(argv)   # the rest are Ray's options for its own agent
    end_with_raylet()
    if args.stderr_filepath:   # where Ray's agent would write its own errors (the node's logs/)
        with open(args.stderr_filepath, "a") as errors:
            os.dup2(errors.fileno(), sys.stderr.fileno())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    log.info("prefray's stand-in for Ray's %s agent (engine/flow/node_agents.py)", args.agent)
    if args.agent == "dashboard":
        wait_as_dashboard(args)
    else:
        serve_runtime_env(args)


if __name__ == "__main__":
    main(sys.argv[1:])
