"""CUPID scoring: answer parsers, JSON schemas and the scorers' prompts (decomposer, matcher, judge).

Parsers return JSON-serialisable data or raise ParseError, which the engine retries once and then
stores as a parse failure that the metrics count (nothing is dropped silently).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prefray.engine.benchmark import ParseError

PROMPTS = Path(__file__).parent / "prompts"
MAX_CHECKLIST = 4
COVERAGE = {"fully covered": 1.0, "partially covered": 0.5, "not covered": 0.0}

DECOMPOSE_SCHEMA = {
    "type": "object",
    "properties": {"checklist": {"type": "array", "items": {"type": "string"}}},
    "required": ["checklist"],
    "additionalProperties": False,
}
MATCH_SCHEMA = {
    "type": "object",
    "properties": {"results": {"type": "array", "items": {
        "type": "object",
        "properties": {"entry": {"type": "string"}, "reasoning": {"type": "string"},
                       "coverage": {"type": "string", "enum": list(COVERAGE)}},
        "required": ["entry", "reasoning", "coverage"],
        "additionalProperties": False,
    }}},
    "required": ["results"],
    "additionalProperties": False,
}
JUDGE_SCHEMA = {
    "type": "object",
    "properties": {"analysis": {"type": "string"}, "score": {"type": "number"}},
    "required": ["analysis", "score"],
    "additionalProperties": False,
}


def template(name: str) -> str:
    return (PROMPTS / name).read_text(encoding="utf-8")


def numbered(items: list[str] | tuple[str, ...]) -> str:
    return "\n".join(f"{k}. {item}" for k, item in enumerate(items, start=1))


# -- prompts ---------------------------------------------------------------------------------
def decompose_messages(preference: str) -> tuple[dict[str, str], ...]:
    return ({"role": "user", "content": template("decompose.txt").format(preference=preference)},)


def match_messages(checklist: list[str] | tuple[str, ...], preference: str) -> tuple[dict[str, str], ...]:
    text = template("match.txt").format(preference=preference, checklist=numbered(checklist), n=len(checklist))
    return ({"role": "user", "content": text},)


def judge_prompt(preference: str, checklist: tuple[str, ...], request: str,
                 response: str) -> tuple[str, tuple[dict[str, str], ...]]:
    """(system, messages) of the alignment judge."""
    system = template("judge_system.txt").format(preference=preference, checklist=numbered(checklist))
    user = template("judge.txt").format(request=request, response=response)
    return system, ({"role": "user", "content": user},)


# -- parsers ---------------------------------------------------------------------------------
_HEADING = re.compile(r"^\s*(?:#{1,6}\s*|[*_]{2})?\s*(?:the\s+user'?s\s+)?(?:most\s+likely\s+|inferred\s+)?"
                      r"preference\s*:?\s*[*_]{0,2}\s*:?\s*$", re.IGNORECASE)
_LABELLED = re.compile(r"^\s*[>*_#-]*\s*(?:the\s+user'?s\s+)?(?:most\s+likely\s+|inferred\s+)?"
                       r"preference\s*[*_]{0,2}\s*[:\-–—]\s*[*_]{0,2}\s*(?P<rest>\S.*)$", re.IGNORECASE)
_INLINE = re.compile(r"\bPreference:")


def _clean(text: str) -> str:
    return text.strip().strip("*_`").strip().strip("\"'“”").strip()


def parse_preference(text: str) -> dict[str, str]:
    """The inferred preference: the last "Preference: …" line (also "**Preference:** …",
    "- Preference - …", a "### Most Likely Preference" heading followed by the sentence, and as a
    last resort an inline "Preference:" label)."""
    lines = text.splitlines()
    found: str | None = None
    for index, line in enumerate(lines):
        labelled = _LABELLED.match(line)
        if labelled and _clean(labelled.group("rest")):
            found = labelled.group("rest")
        elif _HEADING.match(line):
            following = [ln for ln in lines[index + 1:] if ln.strip()]
            if following and not _HEADING.match(following[0]):
                found = following[0]
    if found is None:
        inline = [line[m.end():] for line in lines for m in _INLINE.finditer(line)]
        found = inline[-1] if inline else None
    preference = _clean(found or "")
    if not preference:
        raise ParseError(f"no 'Preference:' line in {text[:80]!r}")
    return {"preference": preference}


def _json_object(text: str) -> Any:
    """The first JSON object in an answer (bare, fenced or inside prose), or None."""
    start = text.find("{")
    while start != -1:
        try:
            return json.JSONDecoder().raw_decode(text[start:])[0]
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
    return None


def parse_checklist(text: str) -> dict[str, list[str]]:
    """{"checklist": [...]}: non-empty questions, at most MAX_CHECKLIST (later ones are dropped).
    An empty list is a valid answer; it scores zero matches."""
    value = _json_object(text)
    items = value.get("checklist") if isinstance(value, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ParseError(f"no JSON checklist (a list of strings) in {text[:80]!r}")
    return {"checklist": [i.strip() for i in items if i.strip()][:MAX_CHECKLIST]}


def coverage_score(label: Any) -> float:
    """1 / 0.5 / 0 for fully / partially / not covered (also the bare words and the numbers)."""
    if isinstance(label, (int, float)) and not isinstance(label, bool) and float(label) in (0.0, 0.5, 1.0):
        return float(label)
    if isinstance(label, str):
        words = label.strip().lower().replace("_", " ")
        words = words if words.endswith("covered") else f"{words} covered"
        if words in COVERAGE:
            return COVERAGE[words]
    raise ParseError(f"unknown coverage label {label!r}")


def parse_match(text: str) -> dict[str, list[float]]:
    """{"scores": [...]}, one per result in answer order. Its length is checked by the metrics."""
    value = _json_object(text)
    results = value.get("results") if isinstance(value, dict) else None
    if not isinstance(results, list):
        raise ParseError(f"no JSON results list in {text[:80]!r}")
    scores = []
    for result in results:
        if not isinstance(result, dict):
            raise ParseError(f"a result is not an object: {result!r}")
        scores.append(coverage_score(result.get("coverage", result.get("label"))))
    return {"scores": scores}


_NUMBER = r"(\d+(?:\.\d+)?)"
_SCORE_LABEL = re.compile(rf"score\W{{0,30}}?{_NUMBER}(?:\s*/\s*10)?", re.IGNORECASE)
_OUT_OF_TEN = re.compile(rf"(?<![\d.]){_NUMBER}\s*/\s*10\b")
_BARE = re.compile(rf"^{_NUMBER}(?:\s*/\s*10)?$")


def _score_value(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        match = _BARE.match(value.strip().strip("*_` ."))
        return float(match.group(1)) if match else None
    return None


def parse_score(text: str) -> dict[str, float]:
    """The judge's 1–10 score, kept exact: "8.5" → 8.5, "7/10" → 7, "**8**" → 8, "Score: 9" → 9.

    Read from the JSON answer if there is one, else the last "score … N" label, else a whole
    answer that is just a number, else the last "N/10". Anything else, or a value outside 1–10,
    is a ParseError.
    """
    value = _json_object(text)
    score = _score_value(value.get("score")) if isinstance(value, dict) else None
    if score is None:
        labelled = _SCORE_LABEL.findall(text)
        bare = _score_value(text)
        out_of_ten = _OUT_OF_TEN.findall(text)
        score = (float(labelled[-1]) if labelled else bare if bare is not None
                 else float(out_of_ten[-1]) if out_of_ten else None)
    if score is None:
        raise ParseError(f"no score in {text[:80]!r}")
    if not 1.0 <= score <= 10.0:
        raise ParseError(f"score {score} is outside 1-10")
    return {"score": score}
