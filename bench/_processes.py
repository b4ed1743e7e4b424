"""A process tree watched from /proc: its processes' CPU time and peak RSS, by kind.

Used by the bench scripts that run a launch as a subprocess: `descendants` and `rss_mb` for a
tree's memory, `TreeWatch` for where a whole run's CPU went (the driver, the gateways, Ray's own
processes, the fake servers) and each process's peak RSS.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def descendants(root: int) -> list[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as handle:
            line = next(x for x in handle if x.startswith("VmRSS:"))
        return int(line.split()[1]) / 1024
    except (OSError, StopIteration):
        return 0.0


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (None: gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * TICK_S
    except (OSError, IndexError, ValueError):
        return None


def kind_of(pid: int, driver: int) -> str:
    """driver, gateway, ray worker (another actor: a limiter, the budget), ray <name> (its own
    processes and agents), fake server, or other."""
    if pid == driver:
        return "driver"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command = handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "prefray.fakellm" in command:
        return "fake server"
    if command.startswith("ray::Gateway"):
        return "gateway"
    words = command.split()
    # a launch's own node: the stand-ins for Ray's agents (`python -u node_agents.py NAME ...`; the
    # raylet's own command line names them further on)
    script = next((i for i, word in enumerate(words[:3]) if word.endswith("node_agents.py")), None)
    if script is not None and script + 1 < len(words):
        return f"ray {words[script + 1]} agent (stand-in)"
    if command.startswith(("ray::DashboardAgent", "ray::RuntimeEnvAgent")):
        return "ray " + words[0].removeprefix("ray::")
    if command.startswith("ray::"):
        return "ray worker"
    if "ray" in command:   # Ray's own: gcs_server, raylet, its agents (python scripts), by name
        name = os.path.basename(words[0]) if words else ""
        if name.startswith("python") and len(words) > 1:
            name = os.path.basename(words[1])
        return f"ray {name}"
    return "other"


@dataclass
class TreeWatch:
    """Samples every process below `root` (but `root`) every `every_s`: CPU seconds by kind (a
    process's last sample counts; one that ends loses at most `every_s` of its CPU) and each
    process's peak RSS. `driver()` names the pid counted as the driver once it is known."""

    root: int
    every_s: float = 2.0
    driver: int = -1
    cpu: dict[int, float] = field(default_factory=dict)
    kinds: dict[int, str] = field(default_factory=dict)
    peak_mb: dict[int, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> TreeWatch:
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.wait(self.every_s):
            self.sample()

    def sample(self) -> None:
        for pid in descendants(self.root):
            if pid == self.root:
                continue
            used = cpu_s(pid)
            if used is None:
                continue
            if self.kinds.get(pid, "other") not in ("driver", "gateway", "fake server"):
                self.kinds[pid] = kind_of(pid, self.driver)   # a Ray worker names itself once it runs an actor
            self.cpu[pid] = used
            self.peak_mb[pid] = max(self.peak_mb.get(pid, 0.0), rss_mb(pid))

    def finish(self) -> dict:
        self.stop.set()
        self.thread.join()
        by_kind: dict[str, dict] = {}
        for pid, kind in self.kinds.items():
            entry = by_kind.setdefault(kind, {"processes": 0, "cpu_s": 0.0, "peak_mb_max": 0.0})
            entry["processes"] += 1
            entry["cpu_s"] += self.cpu.get(pid, 0.0)
            entry["peak_mb_max"] = max(entry["peak_mb_max"], self.peak_mb.get(pid, 0.0))
        return by_kind
