"""Limits a plan cannot run under (rate, tpm, budget, context window, timeouts) are refused before
Ray starts, for a model prefray serves (fake, local) and a remote one alike: exit 2, one line with
the numbers, nothing written (engine/flow/horizon.py)."""

from __future__ import annotations

import sys

import pytest

from prefray.engine.rundir import RunDir
from tests.conftest import refused_here

# The three kinds of model: the fake provider and the embedded model (both served by prefray, so
# nothing is served before the refusal: the embedded model's weights are never loaded), and a
# remote endpoint with its key set (a fake key: nothing is sent).
MODELS = {
    "fake": ["model=fake", "judge=fake"],
    "local": ["model=local", "judge=local"],
    "remote": ["model=gpt-4o", "judge=gpt-4o"],
}
KEYS = {"OPENAI_API_KEY": "sk-never-sent"}
SAMPLES = 3          # benchpres.yaml: samples; BenchPreS's first stage asks each instance's context 3 times


def generations(limit: int) -> int:
    """Calls of BenchPreS's first stage (it reads no earlier stage): one per instance and sample."""
    return limit * SAMPLES


# (overrides, words of the one line): {n} is the first stage's calls for the limit
REFUSALS = {
    "rpm": (["model.rpm=1e-9"], ["model.rpm=1e-09 cannot finish this plan", "answers at least {n} calls",
                                 "one every 6e+10 s", "10080 minutes"]),
    "tpm": (["model.tpm=1"], ["model.tpm=1 is below any one call", "input tokens", "raise model.tpm to at least"]),
    "budget": (["run.budget_usd=1e-9", "model.price_input_per_mtok=1"],
               ["run.budget_usd=1e-09 cannot pay for one call", "reserve at least", "USD"]),
    "context": (["model.context_tokens=8192", "model.max_output_tokens=9000", "model.params.max_tokens=9000"],
                ["model.context_tokens=8192 holds no call", "needs", "prompt and output budget"]),
    "timeout": (["model.timeout_s=0"], ["model.timeout_s=0: allowed is a number > 0"]),
    "timeout-long": (["model.timeout_s=1e9"], ["model.timeout_s=1000000000", "<= 604800"]),
}


@pytest.mark.parametrize("limit", [1, 4])
@pytest.mark.parametrize("kind", sorted(REFUSALS))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_an_impossible_limit_is_refused_before_ray_with_its_numbers(tmp_path, model, kind, limit):
    overrides, words = REFUSALS[kind]
    before = sorted(tmp_path.iterdir())
    # In this process, with Ray forbidden: a launch that started it (or served a model) first fails otherwise.
    done = refused_here(*MODELS[model], "benchmark=benchpres", f"limit={limit}", *overrides,
                        f"run.dir={tmp_path / 'run'}", env=KEYS)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("prefray: nothing was run: "), done.stderr
    for word in words:
        assert word.format(n=generations(limit)) in lines[0], lines[0]
    assert done.stdout == "" and sorted(tmp_path.iterdir()) == before      # no run dir, manifest or cache


def test_the_rate_bound_counts_the_judge_stages_the_plan_counts(tmp_path):
    """A judge makes no call until answers arrive, so its lane is bounded by the counting plan's
    exact calls: those `prefray plan` prints for the judge's stages."""
    from prefray.app.compose import compose_sweep
    from prefray.app.preflight import preflight
    from prefray.engine.flow.counting import count
    from prefray.engine.sweep import Sweep

    overrides = ["model=fake", "judge=fake", "benchmark=benchpres", "limit=2", f"run.dir={tmp_path / 'run'}"]
    _, jobs, benchmarks = compose_sweep(overrides, False)
    instances, _ = preflight(jobs, benchmarks)
    plan = count(Sweep.assemble(jobs, benchmarks, instances, RunDir(tmp_path / "run"))).to_pylist()
    judged = sum(r["calls"] for r in plan if r["role"] == "judge")
    assert judged > generations(2)                       # several judge calls per answer: more than the first stage
    rpm = (judged - 1) / (7 * 24 * 60) * 0.99            # just too slow for the plan's judge calls within a week
    done = refused_here(*overrides, f"judge.rpm={rpm!r}")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"judge.rpm={rpm:g} cannot finish this plan: fake (fake-judge) answers {judged} calls" in line, line
    assert not (tmp_path / "run").exists()

    # a little faster and the same plan fits the week: not refused (the launch goes on to start Ray)
    faster = (judged - 1) / (7 * 24 * 60) * 1.01
    assert "Ray was started" in refused_here(*overrides, f"judge.rpm={faster!r}").stderr


def test_a_free_model_has_no_impossible_budget():
    from prefray.app.compose import compose_sweep
    from prefray.app.preflight import preflight
    from prefray.engine.config.schema import RunConfig
    from prefray.engine.flow.horizon import first_calls, limit_problems
    from prefray.engine.sweep import Sweep

    _, jobs, benchmarks = compose_sweep(["model=local", "judge=local", "limit=1"], False)
    instances, _ = preflight(jobs, benchmarks)
    assert {lane.cheapest_usd for lane in first_calls(jobs, benchmarks, instances).values()} == {0.0}
    sweep = Sweep.assemble(jobs, benchmarks, instances, RunDir("/nonexistent"), RunConfig(budget_usd=1e-9))
    assert limit_problems(sweep) == []


def test_a_tpm_the_plan_cannot_finish_under_names_its_tokens():
    from prefray.engine.flow.horizon import HORIZON_MINUTES, LaneCalls, _over
    from prefray.engine.types import ModelSpec

    spec = ModelSpec(name="m", provider="openai", model_id="m-1", tpm=1000.0)
    tokens = HORIZON_MINUTES * 1000 + 1                              # one token beyond a week at 1000 a minute
    line = _over(LaneCalls(spec, calls=10, tokens=tokens, counted=""))
    assert line is not None and line.startswith(f"model.tpm=1000 cannot finish this plan: m (m-1) is sent {tokens} ")
    assert _over(LaneCalls(spec, calls=10, tokens=tokens - 1, counted="")) is None


@pytest.mark.e2e
def test_as_processes_the_impossible_rpm_of_the_issue_is_refused_at_once_for_every_kind_of_model(tmp_path):
    """`model.rpm=1e-9 limit=1` used to start, send one call and wait ~1,900 years. Each model kind
    in its own `prefray launch` process, at once, with Ray pointed at a port nobody answers (a launch
    that tried Ray would hang there): each exits 2 within the timeout, one line, nothing written."""
    import socket

    from tests.conftest import run_together

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    runs = {model: tmp_path / model for model in MODELS}
    argvs = [[sys.executable, "-m", "prefray", "launch", *MODELS[model], "limit=1", "model.rpm=1e-9",
              f"run.dir={run}"] for model, run in runs.items()]
    # a launch that started would not end: the timeout (subprocess.TimeoutExpired) fails the test
    results = run_together(*argvs, env={**KEYS, "RAY_ADDRESS": f"127.0.0.1:{closed}"}, timeout=120)
    for (model, run), result in zip(runs.items(), results):
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1, (model, result.stderr)
        assert "model.rpm=1e-09 cannot finish this plan" in lines[0] and f"at least {generations(1)} calls" in lines[0]
        assert not run.exists() and result.stdout == "", model



@pytest.mark.e2e
def test_a_rerun_with_an_impossible_rpm_for_what_it_resends_is_refused_before_ray(run_cli, make_fake_server, tmp_path):
    """`prefray rerun` checks the limits against what its send policy sends again: the stored failures.
    Two BenchPreS units fail (the endpoint refuses the key); a rerun at model.rpm=1e-9 would send
    those 2 calls at one per 6e10 s: refused before Ray with the count, nothing sent, nothing written.
    A rerun with nothing to resend (after the failures are answered) is not refused at that rpm."""
    from tests.conftest import command_here

    wrong = make_fake_server("--reject", "fake-model=401")
    right = make_fake_server()
    run_dir = tmp_path / "run"
    run_cli("model=fake", "judge=fake", *wrong.model_overrides(), f"run.dir={run_dir}", "limit=2",
            "benchmark.samples=1", "run.cache=false", expect_code=3)
    stored = sorted(p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file())
    point = [f"model.base_url={right.openai_url}", f"judge.base_url={right.openai_url}", "run.cache=false"]

    done = command_here("rerun", str(run_dir), *point, "model.rpm=1e-9", forbid_ray=True)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "model.rpm=1e-09 cannot finish this plan" in line and "answers 2 calls" in line, line
    assert right.stats()["by_model"].get("fake-model", 0) == 0
    assert sorted(p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file()) == stored

    assert command_here("rerun", str(run_dir), *point, "model.rpm=6000").returncode == 0
    again = command_here("rerun", str(run_dir), *point, "model.rpm=1e-9")
    assert again.returncode == 0, again.stderr          # nothing left to send: the rpm does not matter


def test_a_rerun_reads_an_exponent_as_a_launch_does():
    """YAML 1.1 leaves `1e-9` a string; a launch (Hydra) reads it as a number, and so must a rerun."""
    from prefray.engine.results.manifest import apply_run_overrides

    configs = [{"run": {}, "model": {"params": {}}, "judge": {}}]
    apply_run_overrides(configs, ["model.rpm=1e-9", "judge.tpm=2E5", "model.base_url=http://e.example/v1",
                                  "run.budget_usd=0.5"], "/tmp/run")
    assert configs[0]["model"]["rpm"] == 1e-9 and configs[0]["judge"]["tpm"] == 200000.0
    assert configs[0]["model"]["base_url"] == "http://e.example/v1" and configs[0]["run"]["budget_usd"] == 0.5
