"""`python -m prefray.plan [-m] [overrides...]` — what a launch with the same overrides would cost.

Prints, per model and stage: calls, cached answers, estimated input/output tokens, estimated and
maximum cost, and the lower bound on minutes set by the model's rate limits. Sends nothing and
writes nothing; missing API keys are reported but do not stop an estimate.
"""

from __future__ import annotations

import sys

from prefray.engine.sweep import SweepError
from prefray.launch import EXIT_CONFIG, plan, run_dir_of


def main(argv: list[str] | None = None) -> int:
    from prefray.engine.estimate import print_estimate, simulate, summarize
    from prefray.engine.preflight import load_datasets, missing_keys
    from prefray.engine.session import SweepOptions

    try:
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
    cache = options.open_cache() if (options.cache_path or run_dir.parent).exists() else None
    settings = {"shard_size": options.shard_size, "cache": cache,
                "output_ratio": configs[0]["run"].get("estimate_output_ratio", 0.5)}
    rows = simulate(jobs, benchmarks, instances, run_dir, settings)
    print_estimate(summarize(rows, jobs))
    keys = missing_keys(jobs)
    if keys:
        print("note: a launch would stop for missing API key environment variable(s): " + "; ".join(keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
