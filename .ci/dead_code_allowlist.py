"""Names vulture reports as unused that are used where it cannot see (read by `vulture`, see
pyproject.toml [tool.vulture]). Each line says who uses the name."""

# Fields of the fake provider's counters, served whole as JSON by GET /stats (dataclasses.asdict).
_.batch_requests, _.batch_repeated_requests, _.batch_answered, _.batch_failed  # noqa: B018
_.batch_expired, _.batch_truncated, _.batch_results_read, _.files_uploaded  # noqa: B018
_.rate_limited, _.structured_requests, _.context_overflows  # noqa: B018
# Answers to questions answered before (a resumed harness's re-sends), read by bench/peer_inspect.py.
_.answered_again  # noqa: B018
# Settings of llama.cpp's server object, read by xllamacpp when the embedded model starts.
_.n_ctx, _.n_parallel, _.kv_unified, _.n_threads, _.hostnames, _.verbosity  # noqa: B018
# The `embedded` entry point of the prefray.servers group (pyproject.toml).
serve_embedded  # noqa: B018
# Rate-limit header fields, kept as the provider reported them (tests/test_limits.py reads them).
_.limit_tokens, _.remaining_tokens, _.learned  # noqa: B018
# The benchmark hooks' documented shapes (engine/benchmark.py), read by benchmark authors.
ScoresUnits, ReadsText  # noqa: B018
# Statistics and formulas the tests use as independent references.
cluster_mean_ci, paired_delta_ci, misapplication_rate, nickname_applied, persona_of  # noqa: B018
# α without an interval (engine/results/alpha.py), the tests' check of alpha_ci and of the panels' α.
krippendorff_alpha  # noqa: B018
# A column of the plan's tier table, read through asdict (money/estimate_table.print_tier_lines).
_.expected_latency  # noqa: B018
# A model key the sweep reads from the option file (app/sweep.py: all_options), not from ModelSpec.
_.in_all  # noqa: B018
# Prompt-cache counters of the fake provider, served by GET /stats (tests/test_caching_runs.py).
_.prompt_cache_keys, _.cache_control_requests  # noqa: B018
# The prompt cache a plan can expect (engine/calls/pricing.py), for prefray.plan and bench/cache_savings.py.
expected_cache, expected_for, _.hit_rate, _.saved_usd  # noqa: B018
# The plan's expected share of input read from the prompt cache, a column of `plan --csv` (through asdict).
_.cache_hit_rate  # noqa: B018
# Settings keys the commands read from the composed config (app/catalog.py: conditions,
# app/compose.py: role_models), typed so that a launch checks them.
_.default_condition, _.extractor  # noqa: B018
# The runtime env agent's stand-in (engine/flow/node_agents.py): http.server calls its handler's methods by name.
_.do_POST, _.log_message, _.log_request  # noqa: B018
