"""n samples per request on PRISK narrowing (20 answers per unit at T=0.8): one request per unit,
the same metrics as 20 single requests, and a kill and resume re-asks no finished sample."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from prefray.engine.rundir import RunDir
from prefray.engine.rundir.shards import read_rows
from prefray.fakellm import answers
from tests.test_reliability_runs import start_launch, wait_for

pytestmark = pytest.mark.e2e

NARROWING = ("benchmark=prisk_narrowing", "condition=factorial", "model=fake", "judge=fake", "limit=1",
             "run.cache=false")


def generation_rows(run_dir: Path) -> list[dict]:
    rows = read_rows(RunDir(run_dir), columns=["unit_id", "attempt", "stage", "status", "sample", "text"]).to_pylist()
    return [r for r in rows if r["stage"].startswith("generate")]


def sent_bodies(server) -> list[dict]:
    with urllib.request.urlopen(f"{server.anthropic_url}/requests", timeout=5) as response:
        return json.loads(response.read())


def answers_asked(server) -> Counter:
    """How often the server was asked for each answer, by the fake's answer key ("Fake answer <key[:8]>.")."""
    return Counter(answers.answer_key(b["messages"], (b.get("seed") or 0) + i)[:8]
                   for b in sent_bodies(server) if b.get("model") == "fake-model" and b.get("seed") is not None
                   for i in range(int(b.get("n") or 1)))


def answer_keys(rows) -> Counter:
    return Counter(text.split(".")[0].removeprefix("Fake answer ") for text in rows)


def test_twenty_samples_in_one_request_give_the_metrics_of_twenty_requests(run_cli, make_fake_server, tmp_path):
    server = make_fake_server()
    single, grouped = tmp_path / "single", tmp_path / "grouped"
    run_cli(*NARROWING, *server.model_overrides(), f"run.dir={single}")
    singles = sent_bodies(server)
    server.reset()
    run_cli(*NARROWING, *server.model_overrides(), f"run.dir={grouped}", "model.samples_per_request=20")
    bodies = [b for b in sent_bodies(server) if b.get("model") == "fake-model" and b.get("temperature") == 0.8]
    seeds = Counter(json.dumps(b["messages"]) for b in singles
                    if b.get("model") == "fake-model" and b.get("temperature") == 0.8)
    # a unit's 20 samples (one prompt, seeds 0..19) go as one request with n=20 (two conditions may
    # ask the same prompt: two units, two requests); a prompt asked once (the reflection condition
    # answers each sample's own reflection) stays one request
    asked = Counter((json.dumps(b["messages"]), b.get("n") or 1) for b in bodies)
    expected = Counter({(prompt, 20 if count % 20 == 0 else 1): count // 20 if count % 20 == 0 else count
                        for prompt, count in seeds.items()})
    assert asked == expected
    assert sum(n == 20 for _, n in asked) >= 4
    for name in ("metrics.csv", "deltas.csv"):
        assert (grouped / name).read_bytes() == (single / name).read_bytes(), name
    texts = {(r["unit_id"], r["sample"]): r["text"] for r in generation_rows(single)}
    assert {(r["unit_id"], r["sample"]): r["text"] for r in generation_rows(grouped)} == texts


def test_a_kill_and_resume_re_asks_no_finished_sample(run_cli, make_fake_server, tmp_path):
    server = make_fake_server("--latency", "0.3")
    run_dir = tmp_path / "run"
    args = [*NARROWING, *server.model_overrides(), f"run.dir={run_dir}", "model.samples_per_request=20",
            "run.shard_size=20"]
    process = start_launch(*args)
    try:
        wait_for(lambda: len(generation_rows(run_dir)) >= 40)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    time.sleep(2.5)                                    # the gateway goes with its driver
    before = {(r["unit_id"]): r["text"] for r in generation_rows(run_dir)}
    assert before
    server.reset()
    run_cli(*args)
    after = generation_rows(run_dir)
    assert all(r["attempt"] == 1 for r in after)
    assert len({r["unit_id"] for r in after}) == len(after)             # every sample stored once
    assert {r["unit_id"]: r["text"] for r in after if r["unit_id"] in before} == before
    # two conditions may ask the very same request (two units): an answer is asked on resume only
    # as often as rows needing it were not stored before the kill
    finished, stored, asked = answer_keys(before.values()), answer_keys(r["text"] for r in after), answers_asked(server)
    assert finished and all(asked[key] <= stored[key] - finished[key] for key in finished)
