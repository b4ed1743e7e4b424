"""`prefray plan [-m] [overrides...] [--csv FILE]` — what a launch with the same overrides would cost.

Prints (and with `--csv FILE` also writes), per benchmark, evaluated model option and stage: who
answers the stage and the job's judge, calls, cached answers, estimated input/output tokens, the
output token budget sent per call, estimated cost (with the prompt cache's expected reads and
writes at each model's cached prices; `--csv` adds the cost without it, the saving and the expected
cache tokens) and maximum cost; then per rate-limit lane (provider endpoint and model id) the
calls, limits and lower bound on minutes; the sweep's overall bound (the slowest lane); what the
prompt cache is expected to save; and the jobs per benchmark (conditions × models) with their
judges. Values are printed in full: wrapped on a terminal, plain aligned columns when piped. Sends
nothing and writes nothing; missing API keys are reported but do not stop an estimate.

Calls and tokens are counted in this process from what each stage builds (engine/flow/counting.py:
no runner, no Ray, no shards; input tokens from a sample of each stage's rendered prompts).
`--simulate` runs the real job runner against simulated answers instead (engine/flow/dryrun.py),
slower, for what counting cannot see.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from prefray.app.commands import refused, run_dir_argument
from prefray.app.compose import compose_sweep, conf_dir, run_dir_of, sweep_of
from prefray.app.launch import SweepParser
from prefray.app.sweep import SweepError
from prefray.engine.flow.exits import EXIT_CONFIG, EXIT_OK
from prefray.engine.rundir.cache import ResponseCache
from prefray.engine.sweep import Sweep


def parser(prog: str) -> argparse.ArgumentParser:
    parser = SweepParser(conf_dir(), prog=prog, description=__doc__)
    parser.add_argument("-m", "--multirun", action="store_true", help="estimate every combination of the sweep")
    parser.add_argument("--csv", metavar="FILE", help="write the estimate as CSV too")
    parser.add_argument("--simulate", action="store_true",
                        help="run the job runner against simulated answers instead of counting (slower)")
    parser.add_argument("overrides", nargs="*", help="the overrides a launch would get, e.g. model=all limit=2")
    return parser


def run(args: argparse.Namespace) -> int:
    from prefray.app.preflight import load_datasets, missing_keys
    from prefray.engine.calls.batch.plan import tier_lines  # cost in both tiers, expected latency
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
    sweep = sweep_of(configs, jobs, benchmarks, instances, run_dir_argument(run_dir))
    cache = sweep.open_cache(only_if_present=True)  # an estimate creates no cache file
    rows = plan_rows(sweep, cache, args.simulate)
    lines = summarize(rows, jobs)
    print_estimate(lines, cache_expected=not args.simulate)
    print(tokens_line(rows, args.simulate))
    print(jobs_line(jobs))
    print_tier_lines(tier_lines(rows, jobs))
    if args.csv:
        write_estimate_csv(lines, args.csv)
    keys = missing_keys(jobs)
    if keys:
        print("note: a launch would stop for missing API key environment variable(s): " + "; ".join(keys))
    return EXIT_OK


def plan_rows(sweep: Sweep, cache: ResponseCache | None, simulated: bool) -> Any:
    """The plan's rows: counted (the default), or from the simulated dry run."""
    if simulated:
        from prefray.engine.flow.dryrun import simulate
        from prefray.engine.money.estimate import plan_rows as summed

        return summed(simulate(sweep, cache), sweep.job_list)
    from prefray.engine.flow.counting import count

    return count(sweep, cache)


def tokens_line(rows: Any, simulated: bool) -> str:
    """How the token columns were found."""
    if simulated:
        return ("tokens: every request of the simulated run (input = characters / 4 + a few per message; "
                "output = run.estimate_output_ratio × its output budget)")
    from prefray.engine.flow.counting import SAMPLE_INSTANCES

    sent = [r for r in rows.select(["cached", "calls", "sampled"]).to_pylist() if not r["cached"]]
    measured, calls = sum(r["sampled"] for r in sent), sum(r["calls"] for r in sent)
    how = ("every prompt rendered" if measured == calls else
           f"the rest from a sample of {SAMPLE_INSTANCES} instances per job whose model has other output budgets "
           "than its cell's count, scaled by its calls")
    return (f"tokens: input estimated from a sample of {measured} of {calls} prompts ({how}; characters / 4 + "
            "a few per message); output = run.estimate_output_ratio × each call's output budget")
