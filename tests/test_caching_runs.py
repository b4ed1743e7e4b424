"""Prompt caching in whole runs on the fake provider: what the server reports cached reaches the ledger,
BenchPreS's memory is read from the cache, CUPID marks its prior sessions on both routes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from prefray.benchmarks.benchpres.tests.test_benchpres import HUB_PREFS
from tests.test_reliability_ledger import server_dollars

pytestmark = pytest.mark.e2e

# CIMemories-length: a profile's memory holds about 150 statements
MEMORY = "".join(f"- Statement {i}: the user once mentioned detail number {i} of their life.\n" for i in range(150))
CONTEXTS = [("Bank", "Ask for a loan"), ("Landlord", "Report a leak"), ("Doctor", "Book a visit"),
            ("Teacher", "Excuse an absence")]


def hub_file(tmp_path: Path) -> Path:
    rows = [{"prompt": f"<memory>\n{MEMORY}" + "".join(f"- {p}\n" for p in HUB_PREFS)
                       + f"</memory>\nRecipient: {recipient}\nTask: {task}\nWrite it.",
             "preference_attribute": list(HUB_PREFS), "preference_label": [False, True, False, False, False],
             "name": "Ann", "task": task, "recipient": recipient, "domain": "finance"}
            for recipient, task in CONTEXTS]
    path = tmp_path / "hub.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def costs(run_dir: Path) -> list[dict]:
    with open(run_dir / "costs.csv") as handle:
        return list(csv.DictReader(handle))


def test_benchpres_generation_reads_its_memory_from_the_cache_and_the_ledger_prices_it(
        run_cli, make_fake_server, tmp_path):
    server = make_fake_server()
    run_dir = tmp_path / "run"
    run_cli("benchmark=benchpres", "condition=default", "model=fake", "judge=fake", *server.model_overrides(),
            f"run.dir={run_dir}", "benchmark.samples=3", "benchmark.data.source=hub",
            f"benchmark.data.path={hub_file(tmp_path)}", "run.cache=false")
    lines = costs(run_dir)
    generation = [r for r in lines if r["stage"] == "generate"]
    read = sum(int(r["cache_read_tokens"]) for r in generation)
    total = sum(int(r["input_tokens"]) for r in generation)
    assert total > 0 and read / total >= 0.8, (read, total)
    stats = server.stats()
    assert sum(int(r["cache_read_tokens"]) for r in lines) == stats["cache_read_tokens"]
    assert sum(int(r["input_tokens"]) for r in lines) == stats["input_tokens"]
    # by hand: input at 1.00 USD/Mtok except cached reads at 0.25, output at 2.00 (conf/model/fake.yaml)
    by_hand = ((stats["input_tokens"] - stats["cache_read_tokens"]) * 1.0 + stats["cache_read_tokens"] * 0.25
               + stats["output_tokens"] * 2.0) / 1e6
    assert sum(float(r["cost_usd"]) for r in lines) == pytest.approx(by_hand, rel=1e-9)
    assert server_dollars(stats) == pytest.approx(by_hand, rel=1e-9)
    saved = sum(float(r["cache_saved_usd"]) for r in lines)
    assert saved == pytest.approx(stats["cache_read_tokens"] * 0.75 / 1e6, rel=1e-9)
    assert "Prompt cache:" in (run_dir / "metrics.md").read_text()


def test_cupid_marks_its_prior_sessions_on_both_routes(run_cli, make_fake_server, tmp_path):
    server = make_fake_server()
    run_dir = tmp_path / "run"
    run_cli("-m", "benchmark=cupid", "condition=full", "model=fake,fake-anthropic", "judge=fake",
            *server.model_overrides(), f"run.dir={run_dir}", "limit=2", "run.cache=false")
    stats = server.stats()
    assert stats["cache_control_requests"] > 0      # Anthropic route: a breakpoint after the sessions
    assert stats["prompt_cache_keys"] > 0           # OpenAI route: a key derived from them
    sent = [body for body in json.loads(_get(server, "/requests"))]
    marked = [b for b in sent if isinstance(b.get("system"), list)
              or any(isinstance(m.get("content"), list) for m in b.get("messages", []))]
    assert marked and {b["model"] for b in marked} == {"fake-claude"}
    assert all("prompt_cache_key" not in b for b in marked)
    lines = costs(run_dir)
    assert sum(int(r["cache_write_tokens"]) for r in lines) == stats["cache_write_tokens"] > 0
    assert sum(int(r["cache_read_tokens"]) for r in lines) == stats["cache_read_tokens"]
    prices = {"fake-model": (1.0, 2.0), "fake-judge": (1.0, 2.0), "fake-claude": (3.0, 15.0)}
    assert sum(float(r["cost_usd"]) for r in lines) == pytest.approx(server_dollars(stats, prices), rel=1e-9)


def _get(server, path: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{server.anthropic_url}{path}", timeout=5) as response:
        return response.read().decode()


def test_on_the_anthropic_route_a_profiles_memory_is_written_once_then_read(run_cli, make_fake_server, tmp_path):
    server = make_fake_server("--latency", "0.2")      # requests arriving together would all miss
    run_dir = tmp_path / "run"
    run_cli("benchmark=benchpres", "condition=default", "model=fake-anthropic", "judge=fake",
            *server.model_overrides(), f"run.dir={run_dir}", "benchmark.samples=3", "benchmark.data.source=hub",
            f"benchmark.data.path={hub_file(tmp_path)}", "run.cache=false")
    stats = server.stats()
    # 4 contexts x 3 samples share the memory: the first request writes it, the 11 others read it
    assert stats["cache_control_requests"] == 12
    assert stats["cache_write_tokens"] > 1024 and stats["cache_read_tokens"] == 11 * stats["cache_write_tokens"]
    generation = [r for r in costs(run_dir) if r["stage"] == "generate"]
    assert sum(int(r["cache_read_tokens"]) for r in generation) == stats["cache_read_tokens"]
    assert sum(int(r["cache_write_tokens"]) for r in generation) == stats["cache_write_tokens"]
