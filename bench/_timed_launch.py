"""Run `python -m prefray.launch ARGS` in this process with its steps timed; print one line
`TIMINGS {json}` to stderr when the launch returns: wall-clock marks, seconds per step and this
process's peak RSS (and with BENCH_MEMORY_EVERY=S, its memory every S seconds); then the process
exits as the launch's own does (exits.end_process).

Usage: python bench/_timed_launch.py [launch args...]

The steps are timed by wrapping the functions that do them (nothing else changes; each module is
patched as the launch imports it, so its imports keep the command's order): composing the
sweep, the preflight, Ray's start, the jobs (gateways' start, the calls, closing the gateways), the
compaction of the request and paid records, the metrics tables and figures (aggregation), the
figures alone, and Ray's shutdown where one is run (a joined cluster's disconnect; a local cluster
ends with the process, engine/flow/exits.py).
"""

from __future__ import annotations

import functools
import importlib.abc
import inspect
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from types import ModuleType

marks = {"start": time.time()}
spans: dict[str, float] = {}


def timed(name, function):
    if inspect.iscoroutinefunction(function):
        async def wrapper(*args, **kwargs):
            began = time.time()
            try:
                return await function(*args, **kwargs)
            finally:
                spans[name] = spans.get(name, 0.0) + time.time() - began
    else:
        def wrapper(*args, **kwargs):
            began = time.time()
            try:
                return function(*args, **kwargs)
            finally:
                spans[name] = spans.get(name, 0.0) + time.time() - began
    return functools.wraps(function)(wrapper)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # kilobytes on Linux


def memory_now() -> dict:
    """This process's memory now: RSS and its anonymous and shared parts (MB), Python's allocated
    blocks, the bytes Arrow's pool holds (MB), and the seconds since the start."""
    found = {line.split(":")[0]: int(line.split()[1]) // 1024 for line in open("/proc/self/status")
             if line.startswith(("VmRSS", "RssAnon", "RssShmem"))}
    found["python blocks"] = sys.getallocatedblocks()
    if "pyarrow" in sys.modules:
        found["arrow MB"] = sys.modules["pyarrow"].total_allocated_bytes() // (1 << 20)
    found["t"] = round(time.time() - marks["start"])
    return found


def sample_memory(every: float) -> None:
    """Append memory_now() to marks["memory"] every `every` seconds, on a daemon thread."""
    import threading

    samples = marks.setdefault("memory", [])

    def loop() -> None:
        while True:
            samples.append(memory_now())
            time.sleep(every)
    threading.Thread(target=loop, name="bench-memory", daemon=True).start()


class PatchedOnImport(importlib.abc.MetaPathFinder):
    """Calls `patches[name](module)` once module `name` is imported, wherever the launch imports it:
    the launch's imports stay in its own order (a module imported here first would move its cost,
    and what runs beside it, to the start)."""

    def __init__(self, patches: dict[str, Callable[[ModuleType], None]]):
        self.patches = patches

    def find_spec(self, name, path, target=None):
        if name not in self.patches:
            return None
        for finder in sys.meta_path:
            found = None if finder is self else getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if found is not None:
                load, patch = found.loader.exec_module, self.patches.pop(name)

                def exec_module(module, load=load, patch=patch):
                    load(module)
                    patch(module)
                found.loader.exec_module = exec_module
                return found
        return None


def patch_session(session: ModuleType) -> None:
    session.start_ray = timed("ray start", session.start_ray)
    session.drive = timed("jobs (gateways, calls, close)", session.drive)
    session.compact_paid = timed("compaction", session.compact_paid)
    session.compact_requests = timed("compaction", session.compact_requests)
    aggregate = session.aggregate_sweep

    def aggregate_sweep(*args, **kwargs):
        marks["calls peak MB"] = peak_mb()
        marks["memory at aggregation"] = memory_now()
        return aggregate(*args, **kwargs)

    session.aggregate_sweep = timed("aggregation (tables + figures)", aggregate_sweep)


def patch_ray(ray: ModuleType) -> None:
    ray.shutdown = timed("Ray's shutdown", ray.shutdown)


def main() -> int:
    every = float(os.environ.get("BENCH_MEMORY_EVERY", "0"))   # bench/whole_suite.py sets it
    if every > 0:
        sample_memory(every)
    sys.meta_path.insert(0, PatchedOnImport({
        "prefray.engine.flow.session": patch_session,
        "prefray.engine.calls.dispatch": lambda d: setattr(d.Gateways, "close", timed("closing the gateways",
                                                                                    d.Gateways.close)),
        "prefray.engine.results.plots": lambda p: setattr(p, "write_plots", timed("figures", p.write_plots)),
        "ray": patch_ray}))
    import prefray.app.launch as launch  # what the command's own entry imports before it parses
    import prefray.app.preflight as preflight
    import prefray.engine.flow.exits as exits

    marks["imported"] = time.time()
    launch.compose_sweep = timed("compose", launch.compose_sweep)
    preflight.preflight = timed("preflight", preflight.preflight)
    exits.ends_after_command()   # as `python -m prefray.launch` does (prefray.app.run_process)
    code = launch.run(launch.parser("prefray.launch").parse_args(sys.argv[1:]))
    marks["main done"] = time.time()
    print("TIMINGS " + json.dumps({"marks": marks, "spans": spans, "peak_mb": peak_mb()}), file=sys.stderr, flush=True)
    return exits.end_process(code)   # the process's exit, as the command's own (the parent times it)


if __name__ == "__main__":
    sys.exit(main())
