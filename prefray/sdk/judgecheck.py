"""What `prefray judge-check` needs from a benchmark, declared as `Benchmark.judge_check`: an object
of the `JudgeCheck` shape, whose stages see the labels file's `CheckGroup`s as instances;
`one_row_per_group` and `one_item_verdicts` serve a check whose every group is one item."""

from prefray.engine.judgecheck import CheckGroup, JudgeCheck, one_item_verdicts, one_row_per_group

__all__ = ["CheckGroup", "JudgeCheck", "one_item_verdicts", "one_row_per_group"]
