"""BenchPreS scoring: the judge's verdict parser and the nickname exact-match rule."""

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
_TRUE = {"true", "yes", "1", "applied", "reflected"}
_FALSE = {"false", "no", "0", "not applied", "not reflected"}


def parse_verdict(text: str) -> dict[str, bool]:
    """Read {"applied": bool}; also accepts the JSON inside prose or a fence, and a bare yes/no."""
    match = re.search(r"\{.*?\}", text, flags=re.DOTALL)
    if match:
        try:
            value = json.loads(match.group(0)).get("applied")
        except (json.JSONDecodeError, AttributeError):
            value = None
        if isinstance(value, bool):
            return {"applied": value}
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return {"applied": value.strip().lower() in _TRUE}
    word = text.strip().strip(".*`\"' ").lower()
    if word in _TRUE | _FALSE:
        return {"applied": word in _TRUE}
    raise ParseError(f"no applied true/false verdict in {text[:80]!r}")


def nickname_of(statement: str) -> str | None:
    """The nickname in a preference statement: the text between the first pair of quotes."""
    match = re.search(r"'([^']+)'|\"([^\"]+)\"|“([^”]+)”", statement)
    return next((g for g in match.groups() if g), None) if match else None


def nickname_applied(statement: str, response: str) -> bool:
    """Exact, case-sensitive match of the nickname as a whole word sequence in the response.

    "Captain Jo" matches "Dear Captain Jo," but not "captain jo" (other case) nor
    "Captain Joanna" (inside another word).
    """
    nickname = nickname_of(statement)
    if not nickname:
        return False
    return re.search(rf"(?<!\w){re.escape(nickname)}(?!\w)", response) is not None
