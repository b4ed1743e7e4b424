"""The worked example of docs/add-a-benchmark.md: `examples/stated_preference`, installed as a
plugin (`pip install --no-deps -e examples/stated_preference`; .ci/run does, and runs these tests
then), runs end to end through the command a newcomer types, and its metric equals the fake
provider's rule computed here. Not installed, the module is skipped, saying the command."""

from __future__ import annotations

import csv

import pytest

from prefray.app import catalog
from prefray.engine.types import ChatRequest
from prefray.fakellm.answers import answer_json, answer_text
from tests.conftest import ROOT

NAME = "stated_preference"

if NAME not in catalog.names():
    pytest.skip(f"the example benchmark is not installed: pip install --no-deps -e examples/{NAME} "
                "(docs/contributing.md)", allow_module_level=True)


def installed_example():
    return catalog.load(NAME)


def expected_adherence(benchmark, condition: str) -> float:
    """The fake's answers by its documented rule: the model's text, then the judge's boolean."""
    from prefray.engine.benchmark import Job
    from prefray.engine.types import ModelSpec

    spec = ModelSpec(name="fake", provider="openai", model_id="fake-model")
    job = Job(NAME, condition, spec, {"judge": spec}, benchmark.settings_of(catalog.benchmark_config(NAME)),
              benchmark.condition_of(catalog.condition_config(NAME, condition)), limit=2)
    verdicts = []
    for item in benchmark.load(job):
        request = ChatRequest(messages=tuple(benchmark.conversation(item, job)), seed=0)
        answer = answer_text(list(request.messages), 0)
        judged = benchmark.judge_conversation(item, answer, job)
        verdicts.append(answer_json(benchmark.judge_schema, judged, 0)["adheres"])
    return sum(verdicts) / len(verdicts)


@pytest.mark.e2e
def test_the_installed_example_runs_end_to_end_and_writes_its_metric(run_cli, fake_server, tmp_path):
    benchmark = installed_example()
    run_dir = tmp_path / "run"
    run_cli("model=fake", "judge=fake", f"benchmark={NAME}", "limit=2", *fake_server.model_overrides(),
            f"run.dir={run_dir}", "run.progress=false")
    with open(run_dir / "metrics.csv") as handle:
        rows = {(r["condition"], r["metric"]): r for r in csv.DictReader(handle) if r["benchmark"] == NAME}
    adherence = rows[("stated", "adherence")]
    assert (int(adherence["n"]), int(adherence["excluded"])) == (2, 0)
    assert float(adherence["value"]) == pytest.approx(expected_adherence(benchmark, "stated"))
    assert float(rows[("stated", "failures_judge")]["value"]) == 0.0


def test_the_docs_walk_through_the_example_as_it_is():
    """docs/add-a-benchmark.md shows the example's code verbatim (its module docstring aside)."""
    code = (ROOT / "examples" / NAME / NAME / "__init__.py").read_text()
    body = code.split('"""', 2)[2].strip()
    assert body in (ROOT / "docs" / "add-a-benchmark.md").read_text()
