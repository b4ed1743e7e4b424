"""BenchPreS scoring: the judges' parsers (verdict, completeness score) and the nickname rule."""

from __future__ import annotations

import json
import re

from prefray.engine.benchmark import ParseError

VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"applied": {"type": "boolean"}},
    "required": ["applied"],
    "additionalProperties": False,
}
COMPLETENESS_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}},
    "required": ["score"],
    "additionalProperties": False,
}
_TRUE = {"true", "yes", "1", "applied", "reflected"}
_FALSE = {"false", "no", "0", "not applied", "not reflected"}


def json_field(text: str, key: str) -> tuple[bool, object]:
    """(found a JSON object, its `key` value) for the first {...} in the text; keys match in any case."""
    match = re.search(r"\{.*?\}", text, flags=re.DOTALL)
    if not match:
        return False, None
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError:
        return True, None
    if not isinstance(data, dict):
        return True, None
    return True, next((v for k, v in data.items() if str(k).strip().lower() == key), None)


def parse_verdict(text: str) -> dict[str, bool]:
    """Read {"applied": bool}; also the JSON inside prose or a fence, "true"/"yes" strings, any key
    case, and a short bare answer ("Yes.", "**No**", "Answer: not applied")."""
    found, value = json_field(text, "applied")
    if isinstance(value, bool):
        return {"applied": value}
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return {"applied": value.strip().lower() in _TRUE}
    word = re.sub(r"^(?:answer|verdict|applied)\s*:\s*", "", text.strip().strip(".*`\"' ").lower())
    if not found and word.strip(".*`\"' ") in _TRUE | _FALSE:
        return {"applied": word.strip(".*`\"' ") in _TRUE}
    raise ParseError(f"no applied true/false verdict in {text[:80]!r}")


_QUOTED = re.compile(r"'([^']+)'|\"([^\"]+)\"|“([^”]+)”|‘([^’]+)’")
_CALLED = re.compile(r"\b(?i:call me|address me as|refer to me as|nickname is)\s+"
                     r"((?:[A-Z][\w-]*)(?:\s+[A-Z][\w-]*)*)")


def nickname_of(statement: str) -> str | None:
    """The nickname in a preference statement.

    The text between the first pair of quotes ('…', "…", “…”, ‘…’); without quotes, the
    capitalised words after "call me", "address me as", "refer to me as" or "nickname is".
    """
    match = _QUOTED.search(statement)
    if match:
        return next(g for g in match.groups() if g)
    match = _CALLED.search(statement)
    return match.group(1) if match else None


def nickname_applied(statement: str, response: str) -> bool:
    """Exact, case-sensitive match of the nickname as a whole word sequence in the response.

    "Captain Jo" matches "Dear Captain Jo," but not "captain jo" (other case) nor
    "Captain Joanna" (inside another word).
    """
    nickname = nickname_of(statement)
    if not nickname:
        return False
    return re.search(rf"(?<!\w){re.escape(nickname)}(?!\w)", response) is not None


_SCORE_WORD = re.compile(r"(?<![\w.])([1-5])(?:\.0+)?(?![\w.])")


def parse_score(text: str) -> dict[str, int]:
    """Read {"score": 1..5}; also the JSON inside prose or a fence, "4", "4/5", "Score: 4".

    A score that is not a whole number from 1 to 5 ("8", "3.5") is unparsable, never rounded.
    """
    found, value = json_field(text, "score")
    if isinstance(value, str):
        value = value.strip()
        value = float(value) if re.fullmatch(r"\d+(\.\d+)?", value) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value == int(value) and 1 <= value <= 5:
            return {"score": int(value)}
        raise ParseError(f"completeness score {value!r} is not a whole number from 1 to 5")
    short = re.sub(r"\s*(?:/|out of)\s*5\b", "", text.strip())
    words = _SCORE_WORD.findall(short) if not found else []
    if len(words) == 1 and re.fullmatch(r"[\s\w:*`\"'.-]*", short) and len(short) <= 40:
        return {"score": int(words[0])}
    raise ParseError(f"no completeness score 1-5 in {text[:80]!r}")
