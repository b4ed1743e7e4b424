"""PRISK's IRP judge checked against people (`prefray judge-check benchmark=prisk_irp ...`).

The judge scores 1-5 how free an answer is of superfluous references to the user's profile
(σ_irp(r̂, u, q)); here it gets exactly the benchmark's `irp_judge` request. People give their own
1-5 score to the same (user, context, query, response), and the judge's score is compared with the
majority. (The paper validated its judges differently: six annotators marked whether the judge's
score and rationale were sound, an alignment rate of 89.71% for IRP, App. E.)

Labels file: one row per judged answer, columns `item_id`, `user` (the user's profile as the judge
sees it), `context` (what the model was shown besides the query; empty = the query alone), `query`,
`response`, then one column per annotator with a score 1-5; empty = not scored. Level: ordinal.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from prefray.benchmarks.prisk.scoring import SCORE_SCHEMA, parse_score
from prefray.sdk import ChatRequest, Job, Stage, StageContext, WorkUnit
from prefray.sdk.judgecheck import CheckGroup, one_item_verdicts, one_row_per_group


class IrpJudgeCheck:
    judged = "irp_judge: 1-5, how free the answer is of superfluous profile references"
    role = "judge"
    level = "ordinal"
    columns = ("item_id", "user", "context", "query", "response")
    optional = ("context",)
    group_column = "item_id"
    labels = {str(score): float(score) for score in range(1, 6)}

    def problems(self, groups: Sequence[CheckGroup]) -> list[str]:
        return one_row_per_group(groups, self.group_column)

    def stages(self, job: Job) -> list[Stage]:
        return [Stage("irp_judge", self._units, role="judge", parse=parse_score, inputs=())]

    @staticmethod
    def _units(ctx: StageContext) -> list[WorkUnit]:
        from prefray.benchmarks.prisk.irp import irp_judge_prompt  # the benchmark's own request

        units = []
        for group in ctx.instances:
            (item,) = group.items
            given = item.inputs
            prompt = irp_judge_prompt(given["user"], given["context"], given["query"], given["response"],
                                      ctx.job.settings)
            request = ChatRequest(messages=({"role": "user", "content": prompt},),
                                  params=dict(ctx.job.settings.judge_params), json_schema=SCORE_SCHEMA,
                                  seed=ctx.job.seed)
            units.append(WorkUnit(group.instance_id, request))
        return units

    def verdicts(self, rows: pa.Table, groups: Sequence[CheckGroup]) -> dict[str, float]:
        return one_item_verdicts(rows, groups, "irp_judge", "score")


IRP_JUDGE_CHECK = IrpJudgeCheck()
