"""BenchPreS conditions: how a job's condition settings change an instance's prompt.

Condition settings (conditions/<name>.yaml in this package):
  memory: full | without_preferences   — without_preferences removes exactly the lines of the
                                          memory block that are preference statements
  instruction: null | <name>           — appends prompts/<name>.txt after the task (defense); read
                                          through benchmark.prompts.<name> when overridden
The generation prompt stays one user message in every condition.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from prefray.benchmarks.benchpres.data import Instance
from prefray.benchmarks.benchpres.render import memory_item_template, one_line
from prefray.benchmarks.benchpres.settings import MEMORY_MODES, BenchPresCondition, BenchPresSettings
from prefray.sdk import DataError
from prefray.sdk.prompts import read_prompt

PROMPTS = Path(__file__).parent / "prompts"
_MEMORY_BLOCK = re.compile(r"<memory>(.*?)</memory>", re.DOTALL)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])?\s*")


def item_pattern(item: str) -> re.Pattern | None:
    """A memory line rendered from the item template (its {statement} captured, {number} any
    number), or None when the template has no {statement} on one line."""
    line = next((ln for ln in item.split("\n") if "{statement}" in ln), None)
    if line is None:
        return None
    parts = re.split(r"(\{statement\}|\{number\})", line.replace("{{", "{").replace("}}", "}"))
    pattern = "".join("(?P<statement>.*?)" if part == "{statement}" else r"\d+" if part == "{number}"
                      else re.escape(part) for part in parts)
    return re.compile(rf"^\s*{pattern}\s*$")


def _statement_of(line: str, item: re.Pattern | None = None) -> str:
    found = item.match(line) if item is not None else None
    return found.group("statement").strip() if found else _BULLET.sub("", line, count=1).strip()


def without_preferences(prompt: str, statements: list[str], where: str, item: re.Pattern | None = None) -> str:
    """The prompt with every memory line that is exactly a preference statement removed.

    Only the <memory>…</memory> block is searched when the prompt has one (else the whole
    prompt). A line matches when, read through the memory item template (`item`: its text around
    {statement}, any {number}) or else with a bullet ("- ", "* ", "3.") and surrounding spaces
    removed, it equals the statement. A statement with no such line is an error: the baseline would be wrong.
    """
    block = _MEMORY_BLOCK.search(prompt)
    start, end = block.span(1) if block else (0, len(prompt))
    lines = prompt[start:end].split("\n")
    wanted = {one_line(s) for s in statements}
    missing = sorted(wanted - {_statement_of(line, item) for line in lines})
    if missing:
        raise DataError(f"{where}: field 'prompt': preference statement {missing[0]!r} is not a line of "
                        "the memory block, so the no_preferences prompt cannot be built")
    kept = [line for line in lines if _statement_of(line, item) not in wanted]
    return prompt[:start] + "\n".join(kept) + prompt[end:]


def with_instruction(prompt: str, name: str, benchmark_settings: BenchPresSettings | None = None) -> str:
    if not (PROMPTS / f"{name}.txt").exists():
        raise DataError(f"condition.instruction: no prompt file {PROMPTS / f'{name}.txt'}")
    text = read_prompt(PROMPTS, name, benchmark_settings)
    return prompt.rstrip("\n") + "\n\n" + text.strip() + "\n"


def apply_condition(instances: list[Instance], condition: BenchPresCondition,
                    benchmark_settings: BenchPresSettings | None = None) -> list[Instance]:
    """Each instance with its prompt as the condition wants it (default: unchanged)."""
    memory, instruction = condition.memory, condition.instruction
    if memory not in MEMORY_MODES:
        raise DataError(f"condition.memory: unknown value {memory!r} ({' | '.join(MEMORY_MODES)})")
    item = item_pattern(memory_item_template(benchmark_settings)) if memory == "without_preferences" else None
    out = []
    for inst in instances:
        prompt = inst.prompt
        if memory == "without_preferences":
            prompt = without_preferences(prompt, [p.statement for p in inst.preferences], inst.source, item)
        if instruction:
            prompt = with_instruction(prompt, str(instruction), benchmark_settings)
        out.append(replace(inst, prompt=prompt))
    return out
