"""Run `python -m prefray.launch ARGS` in this process and write its peak RSS to a JSON file.

Usage: python bench/_peak_rss.py OUT.json [launch args...]

Two peaks of this process alone (Ray's workers and raylet are other processes): `calls_mb`, up to
the moment the metrics are computed (planning and every call), and `total_mb`, the whole launch.
"""

from __future__ import annotations

import atexit
import json
import resource
import runpy
import sys


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # kilobytes on Linux


def main() -> None:
    out, args = sys.argv[1], sys.argv[2:]
    seen: dict[str, float] = {}

    from prefray.engine.flow import session

    aggregate = session.aggregate_run

    def measured_aggregate(*a, **k):
        seen["calls_mb"] = peak_mb()
        return aggregate(*a, **k)

    session.aggregate_run = measured_aggregate

    def write() -> None:
        seen["total_mb"] = peak_mb()
        with open(out, "w") as handle:
            json.dump(seen, handle)

    atexit.register(write)
    sys.argv = ["prefray.launch", *args]
    runpy.run_module("prefray.launch", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
