"""CUPID prompts: every request text is built here from the files in `prompts/`.

Each file can be replaced for a run with `benchmark.prompts.<name>=PATH` (the file's stem, e.g.
`benchmark.prompts.match=/path/to/my_matcher.txt`), read through `prefray.sdk.prompts`. A
replacement may use the placeholders of the file it replaces (see PLACEHOLDERS) and also the names
the public reference code uses for the same values (ALIASES), so its prompts can be dropped in.
Files in RAW are inserted verbatim (no placeholders, braces need no escaping).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path

from prefray.benchmarks.cupid.data import Session
from prefray.benchmarks.cupid.settings import CupidSettings
from prefray.sdk.prompts import check_prompt_overrides, prompt_overrides, read_prompt

PROMPTS = Path(__file__).parent / "prompts"
Settings = CupidSettings | None
Prompt = tuple[str | None, tuple[dict[str, str], ...]]  # (system, messages)

PLACEHOLDERS: dict[str, frozenset[str]] = {
    "infer_system": frozenset(),
    "infer": frozenset({"log", "request"}),
    "summarize_system": frozenset(),
    "summarize": frozenset({"session"}),
    "generate_system": frozenset({"log"}),
    "generate_preference_system": frozenset({"preference"}),
    "decompose": frozenset({"preference"}),
    "match": frozenset({"preference", "checklist", "n", "examples"}),
    "rematch": frozenset({"n", "k"}),
    "judge_system": frozenset({"preference", "checklist"}),
    "judge": frozenset({"request", "response", "preference", "checklist"}),
}
# What a replacement must still contain (by its name or an alias) for the stage to mean anything.
REQUIRED: dict[str, frozenset[str]] = {
    "infer": frozenset({"log", "request"}), "summarize": frozenset({"session"}),
    "generate_system": frozenset({"log"}), "generate_preference_system": frozenset({"preference"}),
    "decompose": frozenset({"preference"}), "match": frozenset({"preference", "checklist"}),
}
RAW = frozenset({"match_examples"})
# Names the reference code gives the same values.
ALIASES = {"interaction_log": "log", "curr_request": "request", "user_request": "request",
           "ai_response": "response", "preferences": "preference"}


def render(name: str, settings: Settings, **values: str) -> str:
    """Prompt file `name` (or its override) with its placeholders filled."""
    text = read_prompt(PROMPTS, name, settings)
    aliases = {alias: values[target] for alias, target in ALIASES.items() if target in values}
    return text.format_map({**values, **aliases})


def placeholders(text: str) -> set[str]:
    """The placeholder names a template uses (ValueError on a stray brace)."""
    return {field for _, field, _, _ in string.Formatter().parse(text) if field is not None}


def check_prompts(settings: Settings) -> list[str]:
    """Every problem with the `benchmark.prompts.*` overrides: unknown name, missing file, or a
    placeholder the replaced file cannot be filled with."""
    problems = check_prompt_overrides(PROMPTS, settings)
    for name, value in prompt_overrides(settings).items():
        if name in RAW or name not in PLACEHOLDERS or any(p.startswith((f"benchmark.prompts.{name}=",
                                                                         f"benchmark.prompts.{name}:"))
                                                            for p in problems):
            continue
        try:
            used = placeholders(read_prompt(PROMPTS, name, settings))
        except (OSError, ValueError) as exc:
            problems.append(f"benchmark.prompts.{name}={value}: not a usable template ({exc})")
            continue
        known = PLACEHOLDERS[name] | {a for a, t in ALIASES.items() if t in PLACEHOLDERS[name]}
        unknown = sorted(used - known)
        resolved = {ALIASES.get(u, u) for u in used}
        missing = sorted(REQUIRED.get(name, frozenset()) - resolved)
        if missing:
            problems.append(f"benchmark.prompts.{name}={value}: the prompt must contain "
                            f"{', '.join('{' + m + '}' for m in missing)}")
        if unknown:
            problems.append(f"benchmark.prompts.{name}={value}: unknown placeholder(s) "
                            f"{', '.join('{' + u + '}' for u in unknown)} (this prompt can use: "
                            f"{', '.join('{' + k + '}' for k in sorted(known)) or 'none'}; write a literal "
                            "brace as {{ or }})")
    return problems


def numbered(items: Sequence[str]) -> str:
    return "\n".join(f"{k}. {item}" for k, item in enumerate(items, start=1))


def user(text: str) -> tuple[dict[str, str], ...]:
    return ({"role": "user", "content": text},)


# -- what the evaluated model sees ---------------------------------------------------------------
def render_session(session: Session) -> str:
    return "\n\n".join(f"{'User' if t.role == 'user' else 'Assistant'}: {t.content}" for t in session.dialogue)


def render_log(blocks: Sequence[str]) -> str:
    """Sessions (or their summaries) in chronological order, one headed block each."""
    if not blocks:
        return "(no earlier conversations)"
    return "\n\n".join(f"### Conversation {i}\n\n{block}" for i, block in enumerate(blocks, start=1))


def summarize_messages(session: Session, settings: Settings = None) -> Prompt:
    text = render("summarize", settings, session=render_session(session))
    return render("summarize_system", settings), user(text)


def infer_messages(log: str, request: str, settings: Settings = None) -> Prompt:
    """The task in the system message; the log and the new request in the user turn."""
    return render("infer_system", settings), user(render("infer", settings, log=log, request=request))


def generate_messages(log: str | None, request: str, preference: str | None = None,
                      settings: Settings = None) -> Prompt:
    """The request verbatim as the user turn; the log (or, for the ceiling, the true preference) as system."""
    if preference is not None:
        system = render("generate_preference_system", settings, preference=preference)
    else:
        system = render("generate_system", settings, log=log or "")
    return system, user(request)


# -- the scorers -----------------------------------------------------------------------------------
def decompose_messages(preference: str, settings: Settings = None) -> tuple[dict[str, str], ...]:
    return user(render("decompose", settings, preference=preference))


def match_messages(checklist: Sequence[str], preference: str, settings: Settings = None) -> tuple[dict[str, str], ...]:
    examples = read_prompt(PROMPTS, "match_examples", settings).strip()
    return user(render("match", settings, preference=preference, checklist=numbered(checklist),
                       n=str(len(checklist)), examples=examples))


def rematch_message(n_items: int, n_rated: int, settings: Settings = None) -> tuple[dict[str, str], ...]:
    return user(render("rematch", settings, n=str(n_items), k=str(n_rated)))


def judge_prompt(preference: str, checklist: Sequence[str], request: str, response: str,
                 settings: Settings = None) -> Prompt:
    """(system, messages) of the alignment judge."""
    values = {"preference": preference, "checklist": numbered(checklist)}
    system = render("judge_system", settings, **values)
    return system, user(render("judge", settings, request=request, response=response, **values))
