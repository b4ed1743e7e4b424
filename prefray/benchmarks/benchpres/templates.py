"""BenchPreS prompt templates: the placeholders each file may use, checked before any call.

Every template is filled by name (`str.format_map`); a literal brace is written `{{` / `}}`.
  task_knowledge, task_tagged  {memory} (also {memories}: the same block), {recipient}, {task}
  memory_item                  one memory statement: {statement}, and {number} (1, 2, … in order)
  judge                        {preference}, {response}
  completeness                 {recipient}, {task}, {response}
  defense                      appended as written (no placeholders)
A missing required placeholder, an unknown one or a stray brace is one line naming the key, the
file and the placeholder, raised by `load` before any call is made.
"""

from __future__ import annotations

import string
from pathlib import Path

from prefray.benchmarks.benchpres.settings import BenchPresSettings
from prefray.sdk.prompts import prompt_overrides, prompt_path, read_prompt

PROMPTS = Path(__file__).parent / "prompts"
TASK = frozenset({"memory", "memories", "recipient", "task"})
PLACEHOLDERS = {
    "task_knowledge": TASK, "task_tagged": TASK,
    "memory_item": frozenset({"statement", "number"}),
    "judge": frozenset({"preference", "response"}),
    "completeness": frozenset({"recipient", "task", "response"}),
}
# Each inner set: at least one of these names must appear.
REQUIRED = {
    "task_knowledge": ({"memory", "memories"}, {"recipient"}, {"task"}),
    "task_tagged": ({"memory", "memories"}, {"recipient"}, {"task"}),
    "memory_item": ({"statement"},),
    "judge": ({"preference"}, {"response"}),
    "completeness": ({"task"}, {"response"}),
}


def placeholders(text: str) -> set[str]:
    """The placeholder names a template uses (ValueError on a stray brace or a format spec)."""
    names = set()
    for _, field, spec, conversion in string.Formatter().parse(text):
        if field is None:
            continue
        if not field.isidentifier() or spec or conversion:
            raise ValueError(f"{{{field}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}} "
                             "is not a plain name")
        names.add(field)
    return names


def fill(name: str, settings: BenchPresSettings | None, **values: str) -> str:
    """Prompt file `name` (or its override) with its placeholders filled."""
    return fill_text(read_prompt(PROMPTS, name, settings), **values)


def fill_text(text: str, **values: str) -> str:
    if "memory" in values:
        values.setdefault("memories", values["memory"])
    return text.format_map(values)


def template_problems(settings: BenchPresSettings | None, used: tuple[str, ...] = tuple(PLACEHOLDERS)) -> list[str]:
    """One line per problem with the templates in `used` (the run's own files or their overrides)."""
    problems = []
    overrides = prompt_overrides(settings)
    for name in used:
        where = f"benchmark.prompts.{name}={overrides[name]}" if overrides.get(name) else f"prompts/{name}.txt"
        try:
            names = placeholders(prompt_path(PROMPTS, name, settings).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{where}: not a usable template ({exc}; write a literal brace as {{{{ or }}}})")
            continue
        known = PLACEHOLDERS[name]
        unknown = sorted(names - known)
        if unknown:
            problems.append(f"{where}: unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)} (this "
                            f"prompt can use {', '.join('{' + k + '}' for k in sorted(known))}; write a literal "
                            "brace as {{ or }})")
        missing = [sorted(group) for group in REQUIRED.get(name, ()) if not names & group]
        if missing:
            problems.append(f"{where}: the prompt must contain "
                            f"{', '.join(' or '.join('{' + m + '}' for m in group) for group in missing)}")
    return problems
