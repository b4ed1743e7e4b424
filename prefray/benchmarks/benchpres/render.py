"""BenchPreS prompt rendering shared by the sample builder and the CIMemories loader.

Two memory layouts (`benchmark.memory_layout`, README "Memory layout"):
  knowledge  (default) the layout of the paper's source: a headed block of the user's memories
             gathered from earlier conversations, one statement per item (prompts/memory_item.txt,
             "- {statement}"), then the request (prompts/task_knowledge.txt). The bio is not added:
             CIMemories profiles already hold it as memory statements; the sample's bio becomes its first
             memory statements.
  tagged     the earlier prefray layout: third-person bio sentences, then the statements, inside
             <memory>…</memory> (prompts/task_tagged.txt).
Every memory line is one line: a newline inside a value (a CIMemories address is
"503 Ward Underpass\\nKaufmanberg, ME 03609") becomes ", ".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prefray.benchmarks.benchpres.settings import MEMORY_LAYOUTS, BenchPresSettings
from prefray.benchmarks.benchpres.templates import fill_text
from prefray.sdk import DataError
from prefray.sdk.prompts import read_prompt

PROMPTS = Path(__file__).parent / "prompts"
DEFAULT_LAYOUT = "knowledge"
# Preference i goes right after memory statement number EVERY * (i + 1).
EVERY = 5
_LINE_BREAK = re.compile(r"([,;:.!?])?[ \t]*(?:\r\n|\r|\n)+\s*")


def memory_layout(settings: BenchPresSettings | None) -> str:
    layout = settings.memory_layout if settings is not None else DEFAULT_LAYOUT
    if layout not in MEMORY_LAYOUTS:
        raise DataError(f"benchmark.memory_layout: unknown value {layout!r} ({' | '.join(MEMORY_LAYOUTS)})")
    return layout


def task_template(layout: str, settings: BenchPresSettings | None = None) -> str:
    """The task prompt of a layout (prompts/task_<layout>.txt, or its `benchmark.prompts` override)."""
    return read_prompt(PROMPTS, f"task_{layout}", settings)


def one_line(text: str) -> str:
    """`text` on one line: each line break becomes ", " (or keeps the punctuation before it)."""
    return _LINE_BREAK.sub(lambda m: (m.group(1) or ",") + " ", str(text).strip())


def context_key(recipient: str, task: str) -> str:
    """The key of one recipient–task context: "<recipient> | <task>"."""
    return f"{recipient} | {task}"


def normalize_context_key(key: str) -> str:
    """"IRS Agent|Resolve tax discrepancy" and "IRS Agent | Resolve …" name the same context."""
    recipient, sep, task = key.partition("|")
    return context_key(recipient.strip(), task.strip()) if sep else key.strip()


def bio_statements(bio: Mapping[str, Any], layout: str) -> list[str]:
    """The bio (`name`, `age`, `sex`, `city` or `address`; missing keys skipped) as memory lines:
    third-person sentences in the tagged layout, first-person statements in the knowledge layout."""
    first = layout != "tagged"
    lines = []
    if bio.get("name"):
        lines.append(f"My name is {bio['name']}." if first else f"The user's name is {bio['name']}.")
    if bio.get("age") is not None:
        lines.append(f"I am {bio['age']} years old." if first else f"The user is {bio['age']} years old.")
    if bio.get("sex"):
        lines.append(f"I am {bio['sex']}." if first else f"The user is {bio['sex']}.")
    place = bio.get("city") or bio.get("address")
    if place:
        lines.append(f"I live in {place}." if first else f"The user lives in {place}.")
    return lines


def memory_item_template(settings: BenchPresSettings | None = None) -> str:
    """One memory item (prompts/memory_item.txt, or its `benchmark.prompts` override), without the
    file's final line break."""
    text = read_prompt(PROMPTS, "memory_item", settings)
    return text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text


def render_memory(statements: list[str], item: str | None = None) -> str:
    """The memory block: each statement (on one line) in the item template, {number} counting from
    1, the items joined by a line break. The default item is "- {statement}"."""
    item = memory_item_template() if item is None else item
    return "\n".join(fill_text(item, statement=one_line(line), number=str(n))
                     for n, line in enumerate(statements, start=1))


def interleave(memories: list[str], preferences: list[str]) -> list[str]:
    """Insert preference i after memory statement number EVERY*(i+1) (1-based)."""
    out = []
    for n, memory in enumerate(memories, start=1):
        out.append(memory)
        if n % EVERY == 0 and n // EVERY <= len(preferences):
            out.append(preferences[n // EVERY - 1])
    return out


def render_prompt(memory: str, recipient: str, task: str, template: str) -> str:
    """The full task prompt: the memory block, then the recipient and task."""
    return fill_text(template, memory=memory, recipient=one_line(recipient), task=one_line(task))
