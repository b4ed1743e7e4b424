"""The counting plan's prompt-cache expectation: each row's cost at the model's cached prices, checked
against a hand computation from the stage's own requests (grouped here by their prefix text) and
`expected_cache`; no saving for a model without cached prices; a sampled model takes its cell's share."""

from __future__ import annotations

import pytest

from prefray.engine.benchmark import StageContext
from prefray.engine.calls.batch.plan import tier_lines
from prefray.engine.calls.cache_order import expected_for
from prefray.engine.calls.output_budget import final_request
from prefray.engine.calls.pricing import call_cost, expected_cache
from prefray.engine.calls.providers.caching import prefix_text
from prefray.engine.rundir import RunDir

# BenchPreS's bundled profiles share prefixes shorter than the providers' 1,024-token minimum: a
# lower minimum makes them cacheable, so the expectation has something to count.
CACHEABLE = ["model.cache_min_tokens=64"]


def planned(overrides: list[str], tmp_path) -> tuple[list, dict, dict, dict]:
    """(jobs, benchmarks, instances, plan rows of the generate stage by model option)."""
    from prefray.app.compose import compose_sweep
    from prefray.app.preflight import load_datasets
    from prefray.engine.flow.counting import count
    from prefray.engine.sweep import Sweep

    _, jobs, benchmarks = compose_sweep(["benchmark=benchpres", "judge=fake", *overrides], multirun=True)
    instances, errors = load_datasets(jobs, benchmarks)
    assert not errors
    rows = count(Sweep.assemble(jobs, benchmarks, instances, RunDir(tmp_path / "never")))
    generate = {r["model"]: r for r in rows.to_pylist() if r["stage"] == "generate" and not r["cached"]}
    return jobs, benchmarks, instances, {"rows": rows, "generate": generate}


def generation_requests(job, benchmark, instances) -> list:
    """The generate stage's requests as the runner sends them (the model's final request)."""
    stage = benchmark.stages(job)[0]
    assert stage.name == "generate"
    return [final_request(job.model, unit.request) for unit in stage.build(StageContext(job, instances, {}))]


def by_hand(spec, requests) -> tuple[int, int, int]:
    """(input, cache reads, cache writes): requests grouped by their prefix's text, each group of a
    prefix long enough for `spec` priced by expected_cache at its mean input."""
    groups: dict[str, list] = {}
    for request in requests:
        groups.setdefault(prefix_text(request), []).append(request)
    reads = writes = 0
    for text, members in groups.items():
        if len(text) // 4 < spec.cache_min_tokens:
            continue
        inputs = [r.estimated_input_tokens() for r in members]
        got = expected_cache(spec, len(members), len(text) // 4, sum(inputs) // len(inputs))
        reads, writes = reads + got.read_tokens, writes + got.write_tokens
    return sum(r.estimated_input_tokens() for r in requests), reads, writes


@pytest.mark.parametrize("model", ["fake", "fake-anthropic"])
def test_plan_prices_the_expected_cache_reads_and_writes(model, tmp_path):
    """fake caches as OpenAI does (reads at the cached price set here, writes free), fake-anthropic as
    Anthropic does (reads 0.1×, writes billed at 1.25×): the row's cost is the hand computation's."""
    prices = ["model.price_cache_read_per_mtok=0.5"] if model == "fake" else []
    jobs, benchmarks, instances, plan = planned([f"model={model}", *CACHEABLE, *prices], tmp_path)
    (job,) = jobs
    requests = generation_requests(job, benchmarks["benchpres"], instances[0])
    tokens_in, reads, writes = by_hand(job.model, requests)
    row = plan["generate"][model]
    assert reads > 0.1 * tokens_in   # a profile's contexts and samples read its memory
    assert (writes > 0) == (model == "fake-anthropic")   # OpenAI bills no write
    assert (row["calls"], row["input_tokens"]) == (len(requests), tokens_in)
    assert (row["cache_read_tokens"], row["cache_write_tokens"]) == (reads, writes)
    assert row["cost_usd"] == pytest.approx(call_cost(job.model, tokens_in, row["output_tokens"], reads, writes))
    assert row["uncached_cost_usd"] == pytest.approx(call_cost(job.model, tokens_in, row["output_tokens"]))
    assert row["cache_saved_usd"] == pytest.approx(row["uncached_cost_usd"] - row["cost_usd"])
    assert row["cache_saved_usd"] == pytest.approx(expected_for(job.model, requests).saved_usd)
    assert row["cache_saved_usd"] > 0


def test_a_model_without_cached_prices_expects_no_saving(tmp_path):
    jobs, _, _, plan = planned(["model=fake", "model.price_cache_read_per_mtok=null", *CACHEABLE], tmp_path)
    for row in plan["rows"].to_pylist():
        assert row["cache_read_tokens"] == row["cache_write_tokens"] == 0
        assert row["cache_saved_usd"] == 0.0
        assert row["cost_usd"] == row["uncached_cost_usd"]
    assert plan["generate"]["fake"]["cost_usd"] > 0


def test_summary_and_tier_view_carry_the_saving(tmp_path):
    """The summed lines keep every row's saving; the tier view prices the same reads and writes."""
    from prefray.engine.money.estimate import summarize

    jobs, _, _, plan = planned(["model=fake-anthropic", *CACHEABLE], tmp_path)
    rows = plan["rows"]
    lines = summarize(rows, jobs)
    assert sum(x.cache_saved_usd for x in lines) == pytest.approx(sum(rows.column("cache_saved_usd").to_pylist()))
    (generate,) = [x for x in lines if x.stage == "generate"]
    assert generate.cache_hit_rate == pytest.approx(generate.cache_read_tokens / generate.input_tokens)
    interactive = {line.model.split(" ")[0]: line.interactive_usd for line in tier_lines(rows, jobs)}
    assert interactive["fake-anthropic"] == pytest.approx(generate.cost_usd)
    assert interactive["fake-anthropic"] < generate.uncached_cost_usd


def test_a_sampled_model_takes_its_cells_cache_share(monkeypatch, tmp_path):
    """A model with another output budget is measured on a sample of instances; its prefixes are the
    cell's full count's (a sample would split a profile's group), priced at its own prices."""
    from dataclasses import replace

    from prefray.app.compose import compose_sweep
    from prefray.app.preflight import load_datasets
    from prefray.engine.flow import counting
    from prefray.engine.sweep import Sweep

    _, (job,), benchmarks = compose_sweep(["benchmark=benchpres", "model=fake-anthropic", "judge=fake", *CACHEABLE],
                                          True)
    instances, _ = load_datasets([job], benchmarks)
    longer = replace(job, model=replace(job.model, name="longer", params={"max_tokens": 4096},
                                        price_cache_read_per_mtok=0.15))
    monkeypatch.setattr(counting, "SAMPLE_INSTANCES", 4)
    both = Sweep.assemble([job, longer], benchmarks, {0: instances[0], 1: instances[0]}, RunDir(tmp_path / "never"))
    rows = counting.count(both)
    generate = {r["model"]: r for r in rows.to_pylist() if r["stage"] == "generate"}
    full, sampled = generate["fake-anthropic"], generate["longer"]
    assert sampled["sampled"] < sampled["calls"] == full["calls"]
    share = full["cache_read_tokens"] / full["input_tokens"]
    assert sampled["cache_read_tokens"] / sampled["input_tokens"] == pytest.approx(share, rel=1e-3)
    assert sampled["cache_write_tokens"] / sampled["input_tokens"] == pytest.approx(
        full["cache_write_tokens"] / full["input_tokens"], rel=1e-3)
    expected = call_cost(longer.model, sampled["input_tokens"], sampled["output_tokens"],
                         sampled["cache_read_tokens"], sampled["cache_write_tokens"])
    assert sampled["cost_usd"] == pytest.approx(expected)


def test_printed_plan_states_the_expected_saving(tmp_path):
    import io

    from prefray.engine.money.estimate import print_estimate, summarize

    jobs, _, _, plan = planned(["model=fake-anthropic", *CACHEABLE], tmp_path)
    lines = summarize(plan["rows"], jobs)
    out = io.StringIO()
    print_estimate(lines, out)
    saved, uncached = sum(x.cache_saved_usd for x in lines), sum(x.uncached_cost_usd for x in lines)
    read = sum(x.cache_read_tokens for x in lines) / sum(x.input_tokens for x in lines)
    assert (f"prompt cache: expected {read:.1%} of input read from the cache, saves ~{saved:.4f} USD "
            f"(~{uncached:.4f} USD without it") in out.getvalue()
    assert saved > 0
