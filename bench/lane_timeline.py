"""Where a run's time went, lane by lane: from a run directory's paid record (every try a gateway
sent, with its time), each model id's first and last send and its sends per second over time.

Usage: python bench/lane_timeline.py RUN_DIR [--top 3] [--bucket 120]

Prints, per model id (the `--top` busiest by sends, in full), its sends, first and last send in
seconds after the run's first send, and its sends per second in `--bucket`-second windows: a lane
that bounds the run should send at its rate from its start to its end.
"""

from __future__ import annotations

import argparse
import sys

import pyarrow.compute as pc
from _common import ROOT

sys.path.insert(0, str(ROOT))
from prefray.engine.rundir.layout import RunDir  # noqa: E402
from prefray.engine.rundir.paid import SENT, read_paid  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--bucket", type=float, default=120.0)
    args = parser.parse_args()
    paid = read_paid(RunDir(args.run_dir), ["model_id", "outcome", "at"])
    if paid is None or paid.num_rows == 0:
        raise SystemExit(f"{args.run_dir} has no paid record")
    sent = paid.filter(pc.equal(paid["outcome"], SENT))
    start = pc.min(sent["at"]).as_py()
    lanes = {}
    for model_id, at in zip(sent["model_id"].to_pylist(), sent["at"].to_pylist()):
        lanes.setdefault(model_id, []).append(at - start)
    end = max(max(times) for times in lanes.values())
    print(f"{sent.num_rows} sends over {end:.0f} s, {len(lanes)} model ids")
    ranked = sorted(lanes.items(), key=lambda item: -len(item[1]))
    for rank, (model_id, times) in enumerate(ranked):
        line = f"{model_id}: {len(times)} sends, {min(times):.0f} s to {max(times):.0f} s"
        if rank < args.top:
            buckets = [0] * (int(end // args.bucket) + 1)
            for at in times:
                buckets[int(at // args.bucket)] += 1
            line += "; sends/s per window: " + " ".join(f"{n / args.bucket:.0f}" for n in buckets)
        print(line)


if __name__ == "__main__":
    main()
