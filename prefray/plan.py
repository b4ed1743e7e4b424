"""`python -m prefray.plan [-m] [overrides...]` — what a launch with the same overrides would cost.

Prints (and with `--csv PATH` also writes), per model and stage: calls, cached answers, estimated input/output tokens, estimated and
maximum cost, and the lower bound on minutes set by the model's rate limits. Sends nothing and
writes nothing; missing API keys are reported but do not stop an estimate.
"""

from __future__ import annotations

import sys

from prefray.engine.sweep import SweepError
from prefray.launch import EXIT_CONFIG, plan, run_dir_of


def split_csv_flag(argv: list[str]) -> tuple[list[str], str | None]:
    """Take `--csv PATH` (write the estimate as CSV too) out of the arguments."""
    if "--csv" not in argv:
        return argv, None
    at = argv.index("--csv")
    if at + 1 >= len(argv):
        raise SweepError("--csv needs a file path")
    return argv[:at] + argv[at + 2:], argv[at + 1]


def main(argv: list[str] | None = None) -> int:
    from prefray.engine.estimate import print_estimate, simulate, summarize, write_estimate_csv
    from prefray.engine.preflight import load_datasets, missing_keys
    from prefray.engine.session import SweepOptions

    try:
        argv, csv_path = split_csv_flag(list(sys.argv[1:] if argv is None else argv))
        _, configs, jobs, benchmarks = plan(argv)
        run_dir = run_dir_of(configs)
    except SweepError as exc:
        print(f"prefray: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    instances, errors = load_datasets(jobs, benchmarks)
    if errors:
        print("prefray: cannot estimate:\n  - " + "\n  - ".join(errors), file=sys.stderr)
        return EXIT_CONFIG
    options = SweepOptions.from_config(run_dir, configs[0]["run"])
    cache = options.open_cache(only_if_present=True)  # an estimate creates no cache file
    settings = {"shard_size": options.shard_size, "cache": cache,
                "output_ratio": configs[0]["run"].get("estimate_output_ratio", 0.5)}
    rows = simulate(jobs, benchmarks, instances, run_dir, settings)
    lines = summarize(rows, jobs)
    print_estimate(lines)
    from prefray.engine.batch.plan import print_tiers  # cost in both tiers, expected latency

    print_tiers(rows, jobs)
    if csv_path:
        write_estimate_csv(lines, csv_path)
    keys = missing_keys(jobs)
    if keys:
        print("note: a launch would stop for missing API key environment variable(s): " + "; ".join(keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
