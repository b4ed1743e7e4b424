"""BenchPreS scoring: the judges' parsers (verdict, completeness score) and the nickname rule."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from prefray.sdk import ParseError

# The judge writes a short rationale first, then its verdict (shown side by side in the viewer).
VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"rationale": {"type": "string"}, "applied": {"type": "boolean"}},
    "required": ["rationale", "applied"],
    "additionalProperties": False,
}
COMPLETENESS_SCHEMA = {
    "type": "object",
    "properties": {"rationale": {"type": "string"}, "score": {"type": "integer", "minimum": 1, "maximum": 5}},
    "required": ["rationale", "score"],
    "additionalProperties": False,
}
_TRUE = {"true", "yes", "1", "applied", "reflected"}
_FALSE = {"false", "no", "0", "not applied", "not reflected"}


def first_json_object(text: str) -> tuple[bool, dict | None]:
    """(saw something like a JSON object, the first JSON object in the text or None).

    Every "{" is tried as the start of an object, so braces inside a string value (a rationale
    that says "{sic}") and prose or a code fence around the object do not matter.
    """
    decoder = json.JSONDecoder()
    starts = [m.start() for m in re.finditer(r"\{", text)]
    for start in starts:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return True, value
    return bool(starts) and "}" in text, None


def json_field(text: str, key: str) -> tuple[bool, object]:
    """(found a JSON object, its `key` value) for the first object in the text; keys match in any case."""
    found, data = first_json_object(text)
    if data is None:
        return found, None
    return True, next((v for k, v in data.items() if str(k).strip().lower() == key), None)


def _rationale(text: str) -> dict[str, str]:
    _, value = json_field(text, "rationale")
    return {"rationale": value} if isinstance(value, str) else {}


def parse_verdict(text: str) -> dict[str, object]:
    """Read {"rationale": str, "applied": bool}; also the JSON inside prose or a fence, "true"/"yes"
    strings, any key case, and a short bare answer ("Yes.", "**No**", "Answer: not applied").
    The rationale is kept when the judge gave one; the verdict alone decides."""
    found, value = json_field(text, "applied")
    if isinstance(value, bool):
        return {**_rationale(text), "applied": value}
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return {**_rationale(text), "applied": value.strip().lower() in _TRUE}
    word = re.sub(r"^(?:answer|verdict|applied)\s*:\s*", "", text.strip().strip(".*`\"' ").lower())
    if not found and word.strip(".*`\"' ") in _TRUE | _FALSE:
        return {"applied": word.strip(".*`\"' ") in _TRUE}
    raise ParseError(f"no applied true/false verdict in {text[:80]!r}")


# ---------------------------------------------------------------- nickname rule

# An opening quote is not preceded by a letter (so the apostrophe of "I'd" never opens one) and a
# closing quote is not followed by one (so "O'Brien" stays whole).
_QUOTED = re.compile(r"(?<![\w'’])'(.+?)'(?![\w])|\"(.+?)\"|“(.+?)”|‘(.+?)’(?![\w])|«\s*(.+?)\s*»|„(.+?)[“”]")
_ADDRESS = re.compile(r"\b(?:call(?:ing)? me|address(?:ing)? me as|refer(?:ring)? to me as|nickname is|"
                      r"name me|go by|known as)\b(?:\s+(?:by\s+)?(?:the name|my nickname|my name)\b)?[\s,:]*",
                      re.IGNORECASE)
_ABBREVIATIONS = {"Dr", "Mr", "Mrs", "Ms", "Mx", "Prof", "St", "Jr", "Sr", "Capt", "Lt", "Sgt", "Rev", "Col"}
_NOT_NAMES = {"I", "I'm", "I'd", "I'll", "I've", "I’m", "I’d", "I’ll", "I’ve"}
_TOKEN = re.compile(r"[^\W\d_][\w'’-]*\.?")


def _clean(name: str) -> str | None:
    name = " ".join(name.split())
    last = name.rstrip(",.;:!?").split(" ")[-1] if name else ""
    if name.endswith(".") and last in _ABBREVIATIONS:
        return name
    name = name.rstrip(",.;:!? ")
    return name or None


def _capitalised_run(text: str) -> str | None:
    """The capitalised words at the start of `text` ("Captain Jo from now on" → "Captain Jo")."""
    words, position = [], 0
    while True:
        match = _TOKEN.match(text, position)
        if not match or not match.group(0)[0].isupper() or match.group(0).rstrip(".") in _NOT_NAMES:
            break
        token = match.group(0)
        if token.endswith(".") and token[:-1] not in _ABBREVIATIONS:
            words.append(token[:-1])
            break
        words.append(token)
        position = match.end()
        gap = re.match(r"[ \t]+", text[position:])
        if not gap:
            break
        position += gap.end()
    return _clean(" ".join(words)) if words else None


def nickname_of(statement: str) -> str | None:
    """The nickname in a preference statement (README: "Nickname rule").

    1. a quoted name right after an address phrase ("call me", "address me as", "refer to me as",
       "nickname is", "go by", "known as", optionally "… by the name"): the first such;
    2. else the first quoted text anywhere ('…', "…", “…”, ‘…’, «…»); an apostrophe inside a word
       ("I'd", "Don't", "O'Brien") is never a quote;
    3. else the capitalised words right after an address phrase ("call me Captain Jo from now on").
    Trailing punctuation inside the quotes is dropped ("'Jo.'" → "Jo") except after a title ("Dr.").
    """
    phrases = list(_ADDRESS.finditer(statement))
    for phrase in phrases:
        quoted = _QUOTED.match(statement, phrase.end())
        if quoted:
            return _clean(next(g for g in quoted.groups() if g))
    for quoted in _QUOTED.finditer(statement):
        name = _clean(next(g for g in quoted.groups() if g))
        if name:
            return name
    for phrase in phrases:
        name = _capitalised_run(statement[phrase.end():])
        if name:
            return name
    return None


@dataclass(frozen=True)
class NicknameMatch:
    text: str   # the part of the response that matched (the nickname exactly as written)
    start: int  # its character offset in the response


def nickname_match(nickname: str | None, response: str) -> NicknameMatch | None:
    """Exact, case-sensitive match of the nickname as a whole word sequence in the response.

    "Captain Jo" matches "Dear Captain Jo," but not "captain jo" (other case) nor
    "Captain Joanna" (inside another word).
    """
    if not nickname:
        return None
    found = re.search(rf"(?<!\w){re.escape(nickname)}(?!\w)", response or "")
    return NicknameMatch(found.group(0), found.start()) if found else None


def nickname_decisions(preferences: list[dict], response: str) -> dict[str, dict[str, object]]:
    """The exact-match decision of every nickname preference of a generation's meta, by preference
    index: {"nickname", "span" (the matched text, None when absent), "start" (its offset, or None)}."""
    out: dict[str, dict[str, object]] = {}
    for index, pref in enumerate(preferences):
        if pref.get("category") == "nickname":
            nickname = pref.get("nickname") or nickname_of(pref["statement"])
            found = nickname_match(nickname, response)
            out[str(index)] = {"nickname": nickname, "span": found.text if found else None,
                               "start": found.start if found else None}
    return out


def nickname_applied(statement: str, response: str) -> bool:
    return nickname_match(nickname_of(statement), response) is not None


_SCORE_WORD = re.compile(r"(?<![\w.])([1-5])(?:\.0+)?(?![\w.])")


def parse_score(text: str) -> dict[str, object]:
    """Read {"rationale": str, "score": 1..5}; also the JSON inside prose or a fence, "4", "4/5",
    "Score: 4". A score that is not a whole number from 1 to 5 ("8", "3.5") is unparsable, never
    rounded. The rationale is kept when the judge gave one."""
    found, value = json_field(text, "score")
    if isinstance(value, str):
        value = value.strip()
        value = float(value) if re.fullmatch(r"\d+(\.\d+)?", value) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value == int(value) and 1 <= value <= 5:
            return {**_rationale(text), "score": int(value)}
        raise ParseError(f"completeness score {value!r} is not a whole number from 1 to 5")
    short = re.sub(r"\s*(?:/|out of)\s*5\b", "", text.strip())
    words = _SCORE_WORD.findall(short) if not found else []
    if len(words) == 1 and re.fullmatch(r"[\s\w:*`\"'.-]*", short) and len(short) <= 40:
        return {"score": int(words[0])}
    raise ParseError(f"no completeness score 1-5 in {text[:80]!r}")
