"""`model=paper` for BenchPreS: the ten Table 1 models with the paper's settings, and what a launch
sends them (read back from the fake provider's request log)."""

from __future__ import annotations

import pytest

from prefray.app.compose import conf_dir
from prefray.app.sweep import SweepError, expand, paper_models
from prefray.benchmarks.cupid.tests.test_cupid_prompts import fake_requests

CONF = conf_dir()
REASONING = {"google/gemini-3-pro-preview", "openai/gpt-5.2", "anthropic/claude-sonnet-4.5", "deepseek/deepseek-v3.2"}


def test_model_paper_expands_to_the_papers_ten_models_per_benchmark():
    jobs = expand(["model=paper", "benchmark=benchpres"], CONF, multirun=True)
    assert len(jobs) == 10 and [j.model for j in jobs] == paper_models(CONF, "benchpres")
    assert {j.judge for j in jobs} == {"deepseek-r1"} and {j.condition for j in jobs} == {"default"}
    mixed = expand(["model=paper,fake", "benchmark=benchpres", "judge=fake"], CONF, multirun=True)
    assert [j.model for j in mixed] == [*paper_models(CONF, "benchpres"), "fake"]
    assert [j.model for j in expand(["model=gpt-5.2", "benchmark=benchpres"], CONF, multirun=False)] == ["gpt-5.2"]
    with pytest.raises(SweepError, match="add -m"):
        expand(["model=paper", "benchmark=benchpres"], CONF, multirun=False)


def test_a_benchmark_without_a_lineup_says_so(monkeypatch):
    from prefray.app import catalog

    config = catalog.benchmark_config("benchpres")
    del config["paper_models"]
    monkeypatch.setattr(catalog, "benchmark_config", lambda name: config)
    with pytest.raises(SweepError, match="benchmark=benchpres names no paper lineup"):
        expand(["model=paper", "benchmark=benchpres"], CONF, multirun=True)


@pytest.mark.e2e
def test_a_launch_sends_the_reasoning_models_with_reasoning_on(run_cli, fake_server, tmp_path):
    env = {"OPENROUTER_API_KEY": "test-key", "FRIENDLI_TOKEN": "test-key"}
    run_cli("-m", "model=paper", "benchmark=benchpres", "judge=fake", *fake_server.model_overrides(),
            f"run.dir={tmp_path / 'run'}", "limit=1", "benchmark.samples=1", "run.progress=false", env=env)
    generations = {}
    for body in fake_requests(fake_server):
        if body["model"] != "fake-judge":
            generations.setdefault(body["model"], []).append(body)
    assert len(generations) == 10
    for model in REASONING:                                   # GPT-5.2, Claude-4.5 Sonnet, DeepSeek V3.2, Gemini 3 Pro
        assert all(b.get("reasoning") == {"enabled": True} for b in generations[model]), model
    assert all(b.get("reasoning") == {"enabled": False} for b in generations["qwen/qwen3-32b"])
    assert all(b.get("chat_template_kwargs") == {"enable_thinking": True}
               for b in generations["LGAI-EXAONE/K-EXAONE-236B-A23B"])
    assert all("reasoning" not in b for b in generations["meta-llama/llama-3.3-70b-instruct"])
    assert all(b.get("temperature") == 1.0 for bodies in generations.values() for b in bodies)  # §4.1


def test_the_model_configs_say_which_models_reason_as_the_paper_does():
    """§4.1: "The non-reasoning models include Qwen-3 32B, Llama-3.3 70B Instruct, and Mistral 7B
    Instruct v0.3"; the seven others are reasoning models. Fig. 4's other variants state theirs too."""
    from prefray.app.compose import compose_overrides

    lineup = paper_models(CONF, "benchpres")
    pairs = [m for pair in (("qwen3-235b-a22b-instruct", "qwen3-235b-a22b-thinking"),
                            ("k-exaone-236b-a23b-non-reasoning", "k-exaone-236b-a23b-reasoning"),
                            ("gpt-5.2", "gpt-5.2-reasoning")) for m in pair]
    names = [*lineup, *pairs]
    stated = {name: cfg["model"]["reasoning"]
              for name, cfg in zip(names, compose_overrides([[f"model={n}"] for n in names], CONF))}
    assert {m for m in lineup if stated[m] is False} == {"qwen3-32b-no-thinking", "llama-3.3-70b",
                                                          "mistral-7b-instruct-v0.3"}
    assert sum(stated[m] is True for m in lineup) == 7
    assert [stated[m] for m in pairs] == [False, True] * 3


def test_the_report_marks_non_reasoning_models_with_an_asterisk(tmp_path):
    """Table 1's caption: "Asterisk (*) indicates non-reasoning models". Three models in a run: one
    whose config says reasoning: false (marked), one true and one that does not say (both unmarked)."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from prefray import app

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    stated = {"plain": {"reasoning": False}, "thinker": {"reasoning": True}, "unsaid": {}}
    jobs = [{"benchmark": "benchpres", "model": name, "condition": "default", "judge": "j",
             "config": {"benchmark": {"name": "benchpres"}, "model": {"name": name, **extra}}}
            for name, extra in stated.items()]
    (run_dir / "manifest.json").write_text(json.dumps({"runs": [{"jobs": jobs}]}))
    metrics = [{"benchmark": "benchpres", "model": name, "condition": "default", "judge": "j", "metric": metric,
                "value": value, "n": 10, "excluded": 0, "complete": True}
               for name, mr in (("plain", 0.4), ("thinker", 0.8), ("unsaid", 0.6))
               for metric, value in (("MR", mr), ("AAR", 0.9), ("AAR-MR", 0.9 - mr))]
    pq.write_table(pa.Table.from_pylist(metrics), run_dir / "metrics.parquet")
    assert app.main("report", [str(run_dir)]) == 0
    text = (run_dir / "tables" / "benchpres_table1.md").read_text()
    rows = [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows == ["| Model", r"| plain\*", "| thinker", "| unsaid"]
    assert r"\* non-reasoning model" in text
    tex = (run_dir / "tables" / "benchpres_table1.tex").read_text()
    assert "\nplain* & " in tex and "\nthinker & " in tex and "\nunsaid & " in tex
    assert "* non-reasoning model" in tex
