"""CUPID scoring: JSON schemas and answer parsers of the inference task and the scorers.

Parsers return JSON-serialisable data or raise ParseError, which the engine retries once and then
stores as a parse failure that the metrics count (nothing is dropped silently). They refuse rather
than guess: a template echo, a negative or out-of-range score, a number in exponent notation.
"""

from __future__ import annotations

import json
import re
from typing import Any

from prefray.sdk import ParseError

MAX_CHECKLIST = 4
COVERAGE = {"fully covered": 1.0, "partially covered": 0.5, "not covered": 0.0}

DECOMPOSE_SCHEMA = {
    "type": "object",
    "properties": {"analysis": {"type": "string"}, "checklist": {"type": "array", "items": {"type": "string"}}},
    "required": ["analysis", "checklist"],
    "additionalProperties": False,
}
JUDGE_SCHEMA = {
    "type": "object",
    "properties": {"analysis": {"type": "string"}, "score": {"type": "number"}},
    "required": ["analysis", "score"],
    "additionalProperties": False,
}


def match_schema(n_items: int) -> dict[str, Any]:
    """The matcher's answer: exactly one result per checklist entry (minItems = maxItems = n)."""
    result = {
        "type": "object",
        "properties": {"entry": {"type": "string"}, "reasoning": {"type": "string"},
                       "coverage": {"type": "string", "enum": list(COVERAGE)}},
        "required": ["entry", "reasoning", "coverage"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"results": {"type": "array", "items": result, "minItems": n_items, "maxItems": n_items}},
        "required": ["results"],
        "additionalProperties": False,
    }


# -- parsers ---------------------------------------------------------------------------------
_TAG = re.compile(r"<\s*(?P<close>/)?\s*preference\s*>", re.IGNORECASE)
# An opening tag that is named rather than used: followed by a noun for it ("the <preference> tag",
# "<preference> tags", "a <preference> block"), or quoted ("`<preference>`", '"<preference>"').
_NOUN_AFTER = re.compile(r"\s*[`'\"”’]?\s*(?:tags?|sections?|blocks?|elements?|markers?|labels?|wrappers?|fields?|"
                         r"format)\b", re.IGNORECASE)
_QUOTED_BEFORE = re.compile(r"[`'\"“‘]\s*$")
# Where a section may begin: at the start of a line, or after a colon or the end of a sentence (list
# and emphasis markers allowed); an opening tag inside a sentence ("I won't use <preference> here")
# is named, not used.
_SECTION_START = re.compile(r"(?:^|[:.!?…])\s*[*_>#\-]*\s*$")
_HEADING = re.compile(r"^\s*(?:#{1,6}\s*|[*_]{2})?\s*(?:the\s+user'?s\s+)?(?:most\s+likely\s+|inferred\s+)?"
                      r"preference\s*:?\s*[*_]{0,2}\s*:?\s*$", re.IGNORECASE)
_LABELLED = re.compile(r"^\s*[>*_#-]*\s*(?:the\s+user'?s\s+)?(?:most\s+likely\s+|inferred\s+)?"
                       r"preference\s*[*_]{0,2}\s*[:\-–—]\s*[*_]{0,2}\s*(?P<rest>\S.*)$", re.IGNORECASE)
_INLINE = re.compile(r"\bPreference:")
# A placeholder left as written in a template: "<the preference in one sentence>", "[preference]", "{...}", "...".
_ECHO = re.compile(r"^(?:<[^<>]*>|\[[^\[\]]*\]|\{[^{}]*\}|\.{3}|…|(?:your|the)\s+(?:inferred\s+)?preference"
                   r"(?:\s+(?:here|in\s+one\s+sentence))?)$", re.IGNORECASE)


def _clean(text: str) -> str:
    text = " ".join(text.split())
    return text.strip().strip("*_`").strip().strip("\"'“”").strip()


def _opens(text: str, tag: re.Match) -> bool:
    """Whether an opening tag begins a section: it stands where a section may begin and is neither
    followed by a noun naming it nor quoted."""
    if _NOUN_AFTER.match(text, tag.end()):
        return False
    line = text[:tag.start()].rsplit("\n", 1)[-1]
    return not _QUOTED_BEFORE.search(line) and bool(_SECTION_START.search(line))


def _sections(text: str) -> list[str]:
    """The bodies of the answer's <preference> sections, in answer order. A closing tag closes the
    section of the last opening tag before it (since the previous closing tag) that begins a section,
    or of the last opening tag there when none does (the closing tag confirms it). Without any closed
    section: the text after each opening tag that begins a section, up to the next one."""
    tags = list(_TAG.finditer(text))
    openings = [m for m in tags if not m.group("close")]
    closed, after = [], 0
    for close in (m for m in tags if m.group("close")):
        inside = [m for m in openings if after <= m.start() and m.end() <= close.start()]
        if inside:
            opening = ([m for m in inside if _opens(text, m)] or inside)[-1]
            closed.append(text[opening.end():close.start()])
            after = close.end()
    if closed:
        return closed
    starts = [m for m in openings if _opens(text, m)]
    ends = [m.start() for m in starts[1:]] + [len(text)]
    return [text[m.end():end] for m, end in zip(starts, ends)]


def _candidates(text: str) -> list[str]:
    """Every place an answer may hold its preference, in the order of preference of the forms:
    tagged sections, then headings and labelled lines, then inline labels (each form in answer order)."""
    tagged = [body.strip().split("\n\n")[0] for body in _sections(text)]
    lines = text.splitlines()
    marked = []
    for index, line in enumerate(lines):
        labelled = _LABELLED.match(line)
        if labelled:
            marked.append(labelled.group("rest"))
        elif _HEADING.match(line):
            following = [ln for ln in lines[index + 1:] if ln.strip()]
            if following and not _HEADING.match(following[0]):
                marked.append(following[0])
    inline = [line[m.end():] for line in lines for m in _INLINE.finditer(line)]
    return [c for group in (tagged, marked, inline) for c in reversed(group)]


def parse_preference(text: str) -> dict[str, str]:
    """The inferred preference: the last <preference>…</preference> section (an opening tag that is
    only named, "the <preference> tag", "`<preference>`", or that stands inside a sentence, "I won't use
    <preference> here", opens nothing; without any closing tag, the last non-empty text after an
    opening tag that begins a section); else the last
    "Preference: …" line, "**Preference:** …", "- Preference - …" or the sentence under a
    "### Most Likely Preference" heading; as a last resort the last inline "Preference:" label.
    Whitespace is collapsed. A section that only repeats a template's placeholder is refused."""
    found = [_clean(c) for c in _candidates(text)]
    echoes = [c for c in found if c and _ECHO.match(c)]
    usable = [c for c in found if c and not _ECHO.match(c)]
    if usable:
        return {"preference": usable[0]}
    if echoes:
        raise ParseError(f"the preference section repeats the template: {echoes[0][:80]!r}")
    raise ParseError(f"no marked preference section in {text[:80]!r}")


def _json_object(text: str) -> Any:
    """The first JSON object in an answer (bare, fenced or inside prose), or None."""
    start = text.find("{")
    while start != -1:
        try:
            return json.JSONDecoder().raw_decode(text[start:])[0]
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
    return None


def _json_list(text: str) -> list | None:
    """A JSON list of objects that opens the answer (bare or fenced), or None."""
    start = text.find("[")
    opening = text[:start].strip().lower().removeprefix("```json").removeprefix("```").strip()
    if start == -1 or opening:
        return None
    try:
        value = json.JSONDecoder().raw_decode(text[start:])[0]
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) and value and all(isinstance(v, dict) for v in value) else None


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
    """{"scores": [...]}, one per result in answer order. Its length is checked by the metrics.
    The results are read from {"results": [...]}, or from a bare JSON list of results."""
    value = _json_object(text)
    results = value.get("results") if isinstance(value, dict) else None
    if results is None:
        results = _json_list(text)
    if not isinstance(results, list):
        raise ParseError(f"no JSON results list in {text[:80]!r}")
    scores = []
    for result in results:
        if not isinstance(result, dict):
            raise ParseError(f"a result is not an object: {result!r}")
        scores.append(coverage_score(result.get("coverage", result.get("label"))))
    return {"scores": scores}


_NUMBER = r"(?P<number>[-−+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_SCALE = r"(?:\s*\([^()\n]{0,20}\))?"  # "Score (1-10): 7": the scale in brackets is not the score
# A score stated as the verdict: "Score: 7", "**Score:** 7", "Final score = 7", "The score is 7", "Score - 7".
_SCORE_LABEL = re.compile(rf"\b(?:score|rating){_SCALE}\s*[*_]*\s*(?:[:=]|[-–—](?=\W{{0,6}}\d)|\bis\b)"
                          rf"\W{{0,10}}?{_NUMBER}", re.IGNORECASE)
# A heading that names the score, the number alone at the start of the next non-empty line:
# "### Evaluation Score\n\n7", "**Score**\n8/10".
_SCORE_HEADING = re.compile(rf"^[ \t#>*_]*(?:[^\W\d][\w ]{{0,30}}\s)?score{_SCALE}\s*[*_:]*[ \t]*\n(?:[ \t]*\n)*"
                            rf"[ \t>*_]*{_NUMBER}", re.IGNORECASE | re.MULTILINE)
# A line that is only an overall verdict without the word score: "Overall: 9", "**Final verdict: 7/10**".
_OVERALL_LINE = re.compile(rf"^[ \t>*_#-]*(?:overall|final)(?:[ \t]+\w+)?[ \t]*[*_]*[ \t]*[:=][ \t]*[*_]*{_NUMBER}"
                           r"[*_]*(?:[ \t]*(?:/|out\s+of)[ \t]*10)?[*_]*[ \t]*[.!]?[ \t]*$",
                           re.IGNORECASE | re.MULTILINE)
# Whose score a stated number is, from the words before it in its clause: the whole answer's
# ("Overall score", "Final score", "Total"), one part's ("Item 2 score", "Criterion 1", "Aspect 'tone'",
# "| Item 1 | 8/10"), or neither ("Score: 7", "I rate it 6/10").
_OVERALL_WORDS = re.compile(r"\b(?:overall|final|total|global|aggregate|holistic)\b", re.IGNORECASE)
_PART_WORDS = re.compile(r"\b(?:(?:checklist\s+)?item|criterion|aspect|requirement|question|dimension|category|"
                         r"component|entry)(?:\s*#?\s*\d+\b|\s+(?-i:[A-Z])\b|\s*'[^'\n]{1,40}'|\s*\"[^\"\n]{1,40}\")|"
                         r"\bsub-?scores?\b|\bper[- ]item\b", re.IGNORECASE)
_CLAUSE_END = re.compile(r"[\n.;!?…]")
# A score mentioned in prose: "I give it a score of 8".
_SCORE_PROSE = re.compile(rf"\bscore\s+of\s+[*_]*{_NUMBER}", re.IGNORECASE)
_OUT_OF_TEN = re.compile(rf"(?<![\w.\-–]){_NUMBER}[*_]*\s*(?:/|out\s+of)\s*10\b", re.IGNORECASE)
_RANGE_AFTER = re.compile(r"\s*(?:-|–|—|to)\s*\d", re.IGNORECASE)
_BARE = re.compile(rf"^{_NUMBER}(?:[*_]*\s*(?:/|out\s+of)\s*10)?$", re.IGNORECASE)
# A score named only as what the answer would have needed: "A score of 10 would need …", "a 10/10
# requires …", "To reach a score of 9 …", "a higher score of 8 …".
_HYPOTHETICAL_AFTER = re.compile(r"[*_]*(?:\s*(?:/|out\s+of)\s*10)?[*_]*\s*,?\s*(?:\w+\s+){0,2}?"
                                 r"(?:would|could|should|might|requires?|needs?|demands?|calls?\s+for|"
                                 r"is\s+(?:reserved|kept|meant)|means?|goes?\s+to)\b", re.IGNORECASE)
_HYPOTHETICAL_BEFORE = re.compile(r"(?:\b(?:reach|achieve|justify)\s+|"
                                  r"\b(?:higher|lower|perfect|full|maximum|top|better)\s+)$", re.IGNORECASE)


def _number(token: str) -> float:
    """A plain decimal number; exponent notation is refused ("1e1" is not a judge's 10, nor its 1)."""
    if "e" in token.lower():
        raise ParseError(f"score {token!r} is not a plain number")
    return float(token.replace("−", "-"))


def _score_value(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        match = _BARE.match(value.strip().strip("*_` .").strip())
        return _number(match.group("number")) if match else None
    return None


def _hypothetical(text: str, match: re.Match) -> bool:
    """Whether a number is named as what a better (or worse) answer would get, not as the verdict."""
    before = text[max(0, match.start() - 30):match.start()]
    before = re.sub(r"\b(?:a|an|the)\s+$", "", before, flags=re.IGNORECASE)
    return bool(_HYPOTHETICAL_AFTER.match(text, match.end()) or _HYPOTHETICAL_BEFORE.search(before))


def _one(text: str, match: re.Match) -> float:
    if _RANGE_AFTER.match(text, match.end()):
        raise ParseError(f"the score is a range, not one number: {text[match.start():][:40]!r}")
    return _number(match.group("number"))


def _whose(text: str, match: re.Match, floor: int) -> str:
    """"overall", "part" or "" for a stated score, from its clause up to the number (after the last
    clause end before the match, and after the previous stated score, `floor`)."""
    start = match.start()
    window = text[max(floor, start - 80):start]
    ends = [m.end() for m in _CLAUSE_END.finditer(window)]
    context = text[max(floor, start - 80) + (ends[-1] if ends else 0):match.start("number")]
    if _OVERALL_WORDS.search(context):
        return "overall"
    return "part" if _PART_WORDS.search(context) else ""


def _prose_score(text: str, prose: list[re.Match]) -> float:
    named = {_one(text, m) for m in prose}
    if len(named) > 1:
        raise ParseError(f"the answer names several scores ({', '.join(f'{v:g}' for v in sorted(named))})")
    return named.pop()


def _stated_score(text: str) -> float | None:
    """The score stated in prose (no JSON): an overall score first, in the order of the forms (a
    verdict label, "N/10", "a score of N"); else a plain one in that order, the whole answer being a
    bare number coming second; per-item scores never. None if nothing is stated."""
    forms = {
        "verdict": [*_SCORE_LABEL.finditer(text), *_SCORE_HEADING.finditer(text), *_OVERALL_LINE.finditer(text)],
        "fraction": [m for m in _OUT_OF_TEN.finditer(text) if not _hypothetical(text, m)],
        "prose": [m for m in _SCORE_PROSE.finditer(text) if not _hypothetical(text, m)],
    }
    ends = sorted(m.end() for found in forms.values() for m in found)
    whose = {form: [(m, _whose(text, m, max((e for e in ends if e <= m.start()), default=0)))
                    for m in sorted(found, key=lambda m: m.end())] for form, found in forms.items()}
    for kind in ("overall", ""):
        verdicts, fractions, prose = ([m for m, w in whose[form] if w == kind] for form in forms)
        if verdicts:
            return _one(text, verdicts[-1])
        if kind == "" and (bare := _score_value(text)) is not None:
            return bare
        if fractions:
            return _number(fractions[-1].group("number"))
        if prose:
            return _prose_score(text, prose)
    if any(w == "part" for found in whose.values() for _, w in found):
        raise ParseError("the answer scores single items only, with no overall score")
    return None


def parse_score(text: str) -> dict[str, float]:
    """The judge's 1–10 score, kept exact: "8.5" → 8.5, "7/10" → 7, "**7**/10" → 7, "Score: 9" → 9.

    Read from the JSON answer if there is one. Else from what the prose states: an overall score
    ("Overall score: 7", "Final score: 5", "Overall: 7/10", a line "Overall: 9") wins over every other,
    and a score of one part of the answer ("Item 2 score: 4", "Criterion 1 score: 9", "| Item 1 | 8/10 |")
    is never the answer's ("Overall score: 7 … item 2 score: 4" → 7; per-item scores alone are refused).
    Among the others: the last score stated as a verdict ("Score: 7", "Rating: 7", "The score is 7", a
    "### Evaluation Score" heading with the number on the next line); else a whole answer that is just
    a number; else the last "N/10" or "N out of 10"; else "a score of N" in prose when every such
    mention names the same N. A number named only as what another answer would get ("A score of 10
    would need …", "to reach a score of 9", "a 10/10 requires …") is never the score. Anything else is
    a ParseError, and so is a value outside 1–10 (a sign is read: "Score: -3" is -3, refused), a
    number in exponent notation, a range ("Score: 3-4"), or prose mentions that disagree.
    """
    value = _json_object(text)
    score = _score_value(value.get("score")) if isinstance(value, dict) else None
    if score is None:
        score = _stated_score(text)
    if score is None:
        raise ParseError(f"no score in {text[:80]!r}")
    if not 1.0 <= score <= 10.0:
        raise ParseError(f"score {score:g} is outside 1-10")
    return {"score": score}
