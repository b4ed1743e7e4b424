"""BenchPreS prompt rendering shared by the sample builder and the CIMemories loader.

A memory block is the profile's bio as third-person sentences, then one statement per line
(preferences interleaved among the ordinary memories); the task prompt wraps it (prompts/task.txt).
"""

from __future__ import annotations

from pathlib import Path

TASK_TEMPLATE_PATH = Path(__file__).parent / "prompts" / "task.txt"
# Preference i goes right after memory statement number EVERY * (i + 1).
EVERY = 5


def context_key(recipient: str, task: str) -> str:
    """The key of one recipient–task context: "<recipient> | <task>"."""
    return f"{recipient} | {task}"


def normalize_context_key(key: str) -> str:
    """"IRS Agent|Resolve tax discrepancy" and "IRS Agent | Resolve …" name the same context."""
    recipient, sep, task = key.partition("|")
    return context_key(recipient.strip(), task.strip()) if sep else key.strip()


def render_memory(bio: dict, statements: list[str]) -> str:
    """Render a memory block: bio sentences first, then one statement per line.

    ``bio`` may hold ``name``, ``age``, ``sex`` and ``city`` (or ``address``, as in
    CIMemories); missing keys are skipped. Every line is prefixed with ``"- "``.
    """
    lines = []
    if bio.get("name"):
        lines.append(f"The user's name is {bio['name']}.")
    if bio.get("age") is not None:
        lines.append(f"The user is {bio['age']} years old.")
    if bio.get("sex"):
        lines.append(f"The user is {bio['sex']}.")
    place = bio.get("city") or bio.get("address")
    if place:
        lines.append(f"The user lives in {place}.")
    lines.extend(statements)
    return "\n".join(f"- {line}" for line in lines)


def interleave(memories: list[str], preferences: list[str]) -> list[str]:
    """Insert preference i after memory statement number EVERY*(i+1) (1-based)."""
    out = []
    for n, memory in enumerate(memories, start=1):
        out.append(memory)
        if n % EVERY == 0 and n // EVERY <= len(preferences):
            out.append(preferences[n // EVERY - 1])
    return out


def render_prompt(memory: str, recipient: str, task: str, template: str | None = None) -> str:
    """The full task prompt: the memory block, then the recipient and task."""
    text = template if template is not None else TASK_TEMPLATE_PATH.read_text(encoding="utf-8")
    return text.format(memory=memory, recipient=recipient, task=task)
