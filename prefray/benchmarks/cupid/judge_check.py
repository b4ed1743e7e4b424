"""CUPID's matcher checked against people (`prefray judge-check benchmark=cupid ...`).

The paper's meta-evaluation (App. A.1): annotators rated each entry of a preference's checklist as
fully, partially or not covered by the preference; the matcher's rating of each entry is compared
with the annotators' majority (Krippendorff's α; GPT-4o 0.769, PrefMatcher-7B 0.748, among the
annotators 0.467). Here the matcher gets exactly the benchmark's `match` request (and its `rematch`
when it rated another number of entries), one call per preference with all its entries.

Labels file: one row per checklist entry, columns `pair_id`, `preference`, `entry`, then one column
per annotator with `fully` / `partially` / `not` (or `fully covered` …, or 1 / 0.5 / 0).
Rows of one `pair_id` are one checklist, in file order, and must share their `preference`.
Level: ordinal (not < partially < fully).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from prefray.benchmarks.cupid.prompting import match_messages, rematch_message
from prefray.benchmarks.cupid.scoring import match_schema, parse_match
from prefray.sdk import ChatRequest, Job, Stage, StageContext, WorkUnit, parsed
from prefray.sdk.judgecheck import CheckGroup

LABELS = {"fully": 1.0, "partially": 0.5, "not": 0.0,
          "fully covered": 1.0, "partially covered": 0.5, "not covered": 0.0}


class MatcherCheck:
    judged = "matcher: coverage of each checklist entry by the preference"
    role = "matcher"
    level = "ordinal"
    columns = ("pair_id", "preference", "entry")
    optional: tuple[str, ...] = ()
    group_column = "pair_id"
    labels = LABELS

    def problems(self, groups: Sequence[CheckGroup]) -> list[str]:
        """A checklist's rows must share one preference."""
        return [f"pair_id {group.instance_id}: its rows give {n} different preferences" for group in groups
                if (n := len({item.inputs["preference"] for item in group.items})) != 1]

    def stages(self, job: Job) -> list[Stage]:
        return [Stage("match", self._match_units, role="matcher", parse=parse_match, inputs=()),
                Stage("rematch", self._rematch_units, role="matcher", parse=parse_match, inputs=("match",),
                      per_unit=True)]

    @staticmethod
    def _request(group: CheckGroup, job: Job, extra: tuple[dict[str, str], ...] = ()) -> ChatRequest:
        entries = [item.inputs["entry"] for item in group.items]
        params = dict(job.settings.params.matcher)
        messages = (*match_messages(entries, group.items[0].inputs["preference"], job.settings), *extra)
        return ChatRequest(messages, params=params, json_schema=match_schema(len(entries)), seed=job.seed)

    def _match_units(self, ctx: StageContext) -> list[WorkUnit]:
        judge = ctx.job.role_model("judge").name
        return [WorkUnit(group.instance_id, self._request(group, ctx.job), item=judge,
                         meta={"judge": judge, "n_items": len(group.items)}) for group in ctx.instances]

    def _rematch_units(self, ctx: StageContext) -> list[WorkUnit]:
        """A rating of another number of entries is asked once more, as the benchmark does."""
        judge = ctx.job.role_model("judge").name
        units = []
        for row, group in ctx.answered("match"):
            n_rated = len(parsed(row)["scores"])
            if n_rated != len(group.items):
                extra = ({"role": "assistant", "content": row["text"]},
                         *rematch_message(len(group.items), n_rated, ctx.job.settings))
                units.append(WorkUnit(group.instance_id, self._request(group, ctx.job, extra), item=judge,
                                      meta={"judge": judge, "n_items": len(group.items)}))
        return units

    def verdicts(self, rows: pa.Table, groups: Sequence[CheckGroup]) -> dict[str, float]:
        """Each entry's rating, from the rematch answer where there is one, else the match answer;
        a group whose answer rated another number of entries (or failed) gives no verdict."""
        answers: dict[str, list[float]] = {}
        for stage in ("match", "rematch"):  # a rematch answer replaces its match answer
            for row in rows.filter(pc.equal(rows["stage"], stage)).to_pylist():
                if row["status"] == "ok":
                    answers[row["instance_id"]] = parsed(row)["scores"]
                elif stage == "rematch":
                    answers.pop(row["instance_id"], None)
        out = {}
        for group in groups:
            scores = answers.get(group.instance_id)
            if scores is not None and len(scores) == len(group.items):
                out.update({item.item: score for item, score in zip(group.items, scores)})
        return out


MATCHER_CHECK = MatcherCheck()
