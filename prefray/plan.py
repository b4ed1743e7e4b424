"""`python -m prefray.plan [-m] [overrides...] [--csv FILE]` — what a launch with the same overrides would cost.

Prints (and with `--csv FILE` also writes), per benchmark, evaluated model option and stage: who
answers the stage and the job's judge, calls, cached answers, estimated input/output tokens, the
output token budget sent per call, estimated and maximum cost; then per rate-limit lane (provider
endpoint and model id) the calls, limits and lower bound on minutes; the sweep's overall bound
(the slowest lane); and the jobs per benchmark (conditions × models) with their judges. Values
are printed in full: wrapped on a terminal, plain aligned columns when piped. Sends nothing and
writes nothing; missing API keys are reported but do not stop an estimate.
"""

from __future__ import annotations

import sys

from prefray.engine.config.sweep import SweepError
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
    from prefray.engine.money.estimate import print_estimate, simulate, summarize, write_estimate_csv
    from prefray.engine.money.estimate_table import jobs_line, print_tier_lines
    from prefray.engine.config.preflight import load_datasets, missing_keys
    from prefray.engine.flow.session import SweepOptions

    try:
        argv, csv_path = split_csv_flag(list(sys.argv[1:] if argv is None else argv))
        if {"-h", "--help"} & set(argv):
            print(__doc__)  # then the launch's help: the same overrides, groups and settings
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
    print(jobs_line(jobs))
    from prefray.engine.calls.batch.plan import tier_lines  # cost in both tiers, expected latency

    print_tier_lines(tier_lines(rows, jobs))
    if csv_path:
        write_estimate_csv(lines, csv_path)
    keys = missing_keys(jobs)
    if keys:
        print("note: a launch would stop for missing API key environment variable(s): " + "; ".join(keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
