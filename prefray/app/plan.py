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

import argparse
import sys

from prefray.app.commands import refused
from prefray.app.compose import compose_sweep, conf_dir, run_dir_of
from prefray.app.launch import SweepParser
from prefray.engine.config.sweep import SweepError
from prefray.engine.flow.exits import EXIT_CONFIG, EXIT_OK


def parser(prog: str) -> argparse.ArgumentParser:
    parser = SweepParser(conf_dir(), prog=prog, description=__doc__)
    parser.add_argument("-m", "--multirun", action="store_true", help="estimate every combination of the sweep")
    parser.add_argument("--csv", metavar="FILE", help="write the estimate as CSV too")
    parser.add_argument("overrides", nargs="*", help="the overrides a launch would get, e.g. model=all limit=2")
    return parser


def run(args: argparse.Namespace) -> int:
    from prefray.engine.calls.batch.plan import tier_lines  # cost in both tiers, expected latency
    from prefray.engine.config.preflight import load_datasets, missing_keys
    from prefray.engine.flow.dryrun import simulate
    from prefray.engine.flow.session import SweepOptions
    from prefray.engine.money.estimate import print_estimate, summarize, write_estimate_csv
    from prefray.engine.money.estimate_table import jobs_line, print_tier_lines

    try:
        configs, jobs, benchmarks = compose_sweep(args.overrides, args.multirun)
        run_dir = run_dir_of(configs)
    except SweepError as exc:
        return refused(exc)
    instances, errors = load_datasets(jobs, benchmarks)
    if errors:
        print("prefray: cannot estimate:\n  - " + "\n  - ".join(errors), file=sys.stderr)
        return EXIT_CONFIG
    options = SweepOptions.from_config(run_dir, configs[0]["run"])
    cache = options.open_cache(only_if_present=True)  # an estimate creates no cache file
    settings = {"shard_size": options.shard_size, "cache": cache,
                "output_ratio": options.run.estimate_output_ratio}
    rows = simulate(jobs, benchmarks, instances, run_dir, settings)
    lines = summarize(rows, jobs)
    print_estimate(lines)
    print(jobs_line(jobs))
    print_tier_lines(tier_lines(rows, jobs))
    if args.csv:
        write_estimate_csv(lines, args.csv)
    keys = missing_keys(jobs)
    if keys:
        print("note: a launch would stop for missing API key environment variable(s): " + "; ".join(keys))
    return EXIT_OK
