"""BenchPreS's preference judge checked against people (`prefray judge-check benchmark=benchpres ...`).

The paper validated its judge on 100 sampled (response, preference) pairs, half with gold label
apply and half suppress, annotated by a human and GPT-5-mini beside the DeepSeek-R1 judge (§6,
Table 4: pairwise agreement). Here the judge gets exactly the benchmark's `judge` request: is this
one preference reflected in this response? One call per labelled row.

Labels file: one row per (response, preference) pair, columns `item_id`, `preference`, `response`,
then one column per annotator with `yes` / `no` (also `applied` / `not applied`, `true` / `false`,
1 / 0); empty = not labelled. Level: nominal.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from prefray.benchmarks.benchpres.scoring import VERDICT_SCHEMA, parse_verdict
from prefray.sdk import ChatRequest, Job, Stage, StageContext, WorkUnit
from prefray.sdk.judgecheck import CheckGroup, one_item_verdicts, one_row_per_group

LABELS = {"yes": 1.0, "no": 0.0, "applied": 1.0, "not applied": 0.0, "true": 1.0, "false": 0.0}


class PreferenceJudgeCheck:
    judged = "judge: is the preference reflected in the response"
    role = "judge"
    level = "nominal"
    columns = ("item_id", "preference", "response")
    optional: tuple[str, ...] = ()
    group_column = "item_id"
    labels = LABELS

    def problems(self, groups: Sequence[CheckGroup]) -> list[str]:
        return one_row_per_group(groups, self.group_column)

    def stages(self, job: Job) -> list[Stage]:
        return [Stage("judge", self._units, role="judge", parse=parse_verdict, inputs=())]

    @staticmethod
    def _units(ctx: StageContext) -> list[WorkUnit]:
        from prefray.benchmarks.benchpres.benchmark import judge_messages  # the benchmark's own request

        params = dict(ctx.job.settings.judge_params)
        units = []
        for group in ctx.instances:
            (item,) = group.items
            messages = judge_messages(item.inputs["preference"], item.inputs["response"], ctx.job.settings)
            request = ChatRequest(messages=messages, params=params, json_schema=VERDICT_SCHEMA, seed=ctx.job.seed)
            units.append(WorkUnit(group.instance_id, request))
        return units

    def verdicts(self, rows: pa.Table, groups: Sequence[CheckGroup]) -> dict[str, float]:
        return one_item_verdicts(rows, groups, "judge", "applied")


PREFERENCE_JUDGE_CHECK = PreferenceJudgeCheck()
