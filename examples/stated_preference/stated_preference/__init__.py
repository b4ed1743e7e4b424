"""Stated preference: does a model keep a preference the user stated in an earlier turn?

Each item holds a preference, a line of small talk and a later request the preference bears on.
Condition `stated`: the earlier turn states the preference; `unstated`: it is small talk (the
baseline). A judge decides whether the answer keeps the preference; `adherence` is the mean.

Run: prefray launch -m benchmark=stated_preference condition=all model=fake judge=fake limit=2
"""

import json
from dataclasses import dataclass
from pathlib import Path

from prefray.sdk import ConditionSettings, ParseError, RubricBenchmark, assistant, read_items, user
from prefray.sdk.settings import REQUIRED, boolean, key

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Stated(ConditionSettings):
    """A condition's keys (conditions/*.yaml): whether the earlier turn states the preference."""

    state_preference: bool = key(boolean(), REQUIRED, "the earlier turn states the preference (else small talk)")


class StatedPreference(RubricBenchmark):
    name = "stated_preference"
    prompts = HERE / "prompts"
    metric = "adherence"
    condition_type = Stated
    judge_schema = {"type": "object", "properties": {"adheres": {"type": "boolean"}}, "required": ["adheres"]}

    def items(self, job):
        return read_items(HERE / "data.jsonl", ("preference", "small_talk", "request"), job.limit)

    def conversation(self, item, job):
        earlier = item["preference"] if job.condition_settings.state_preference else item["small_talk"]
        return [user(earlier), assistant("Noted."), user(self.prompt("answer", item, job))]

    def parse(self, text):
        try:
            verdict = json.loads(text)["adheres"]
        except (ValueError, KeyError, TypeError):
            raise ParseError(f"not a JSON object with 'adheres': {text[:80]!r}") from None
        if not isinstance(verdict, bool):
            raise ParseError(f"'adheres' is not true or false: {verdict!r}")
        return float(verdict)


BENCHMARK = StatedPreference()
