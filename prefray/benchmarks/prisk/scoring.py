"""PRISK scoring: JSON schemas and parsers for routing and judge answers, answer extraction for
exact-match IRP items, and the canonical form of narrowing options."""

from __future__ import annotations

import json
import re
import unicodedata
from decimal import Decimal, InvalidOperation
from typing import Any

from prefray.engine.benchmark import ParseError

ROUTE_SCHEMA = {"type": "object", "properties": {"retrieve": {"type": "boolean"}},
                "required": ["retrieve"], "additionalProperties": False}
SCORE_SCHEMA = {"type": "object", "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}},
                "required": ["score"], "additionalProperties": False}
OPTIONS_SCHEMA = {"type": "object", "properties": {"options": {"type": "array", "items": {"type": "string"}}},
                  "required": ["options"], "additionalProperties": False}
ATTRIBUTION_SCHEMA = {"type": "object", "properties": {"attributable": {"type": "boolean"}},
                      "required": ["attributable"], "additionalProperties": False}


def useful_schema(count: int) -> dict[str, Any]:
    array = {"type": "array", "items": {"type": "boolean"}, "minItems": count, "maxItems": count}
    return {"type": "object", "properties": {"useful": array}, "required": ["useful"], "additionalProperties": False}


def first_json(text: str) -> Any:
    """The first JSON object or list in the text (prose and code fences around it are ignored)."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[{\[]", text):
        try:
            return decoder.raw_decode(text, match.start())[0]
        except json.JSONDecodeError:
            continue
    return None


_TRUE, _FALSE = {"true", "yes", "1"}, {"false", "no", "0"}


def _boolean(text: str, key: str) -> bool:
    data = first_json(text)
    value = data.get(key) if isinstance(data, dict) else None
    if isinstance(value, bool):
        return value
    word = (value if isinstance(value, str) else text).strip().strip(".*`\"' ").lower()
    if word in _TRUE | _FALSE:
        return word in _TRUE
    raise ParseError(f"no {key} true/false in {text[:80]!r}")


def parse_route(text: str) -> dict[str, bool]:
    return {"retrieve": _boolean(text, "retrieve")}


def parse_attribution(text: str) -> dict[str, bool]:
    return {"attributable": _boolean(text, "attributable")}


def parse_score(text: str) -> dict[str, int]:
    """A 1-5 integer score from {"score": n} or a bare number; 3.5 or 8 are rejected, not rounded."""
    data = first_json(text)
    value: Any = data.get("score") if isinstance(data, dict) else None
    if value is None:
        match = re.fullmatch(r"\s*(?:score\s*[:=]?\s*)?(\d+(?:\.\d+)?)\s*(?:/\s*5)?\s*\.?\s*", text, flags=re.I)
        value = match.group(1) if match else None
    try:
        number = float(value) if not isinstance(value, bool) and value is not None else None
    except ValueError:
        number = None
    if number is None or number != int(number) or not 1 <= number <= 5:
        raise ParseError(f"no 1-5 integer score in {text[:80]!r}")
    return {"score": int(number)}


def parse_options(text: str) -> dict[str, list[str]]:
    data = first_json(text)
    options = data.get("options") if isinstance(data, dict) else data
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise ParseError(f"no list of option strings in {text[:80]!r}")
    return {"options": [o.strip() for o in options if o.strip()]}


def parse_useful(text: str) -> dict[str, list[bool]]:
    data = first_json(text)
    flags = data.get("useful") if isinstance(data, dict) else data
    if not isinstance(flags, list) or not all(isinstance(f, bool) for f in flags):
        raise ParseError(f"no list of true/false flags in {text[:80]!r}")
    return {"useful": flags}


def normalise_score(score: int) -> float:
    """A 1-5 judge score on a 0-100 scale: (s - 1) / 4 * 100."""
    return (score - 1) / 4 * 100


# ---------------------------------------------------------------- exact-match extraction

_NUM = r"-?\$?\s?\d[\d,]*(?:\.\d+)?|-?\$?\s?\.\d+"
_NUMBER_MARKERS = (
    rf"\\boxed\{{\s*({_NUM})",
    rf"####\s*({_NUM})",
    rf"answer\s*(?:is|:|=)?\s*(?:\*\*)?\s*({_NUM})",
    rf"\*\*\s*({_NUM})",
)


def _to_decimal(text: str) -> Decimal | None:
    cleaned = text.replace("$", "").replace(",", "").replace(" ", "")
    try:
        return Decimal(cleaned)
    except InvalidOperation:
        return None


def extract_number(text: str) -> Decimal | None:
    """The final numeric answer: an explicit marker (\\boxed{}, ####, "answer is", bold), else the
    last number in the text; "$1,234.50" reads as 1234.50."""
    for pattern in _NUMBER_MARKERS:
        found = re.findall(pattern, text, flags=re.IGNORECASE)
        if found:
            return _to_decimal(found[-1])
    numbers = re.findall(_NUM, text)
    return _to_decimal(numbers[-1]) if numbers else None


def _letter_patterns(letters: str) -> tuple[str, ...]:
    upper, lower = f"[{letters}]", f"[{letters}{letters.lower()}]"
    answer = r"(?i:answer)\s*(?i:is|:)?\s*(?:(?i:option)\s*)?"
    return (
        rf"{answer}\(({lower})\)",
        rf"{answer}[\[*\s]*({upper})\b",
        rf"\\boxed\{{\s*({lower})\s*\}}",
        rf"\*\*\s*\(?({upper})\)?[.:)]?\s*\*\*",
        rf"\(({upper})\)",
        rf"(?:^|\n)\s*({upper})[.):](?:\s|$)",
        rf"\b(?i:option)\s+({lower})\b",
    )


def extract_choice(text: str, choices: tuple[str, ...]) -> str | None:
    """The chosen letter: "Answer: B", "(B)", "**B**", a line "B." or "B)", a lone "B", else the one
    choice whose text appears in the answer (the last-mentioned one when several do). An explicit
    "answer is" takes its first occurrence; other markers take their last."""
    letters = "".join(chr(ord("A") + i) for i in range(len(choices)))
    stripped = text.strip().strip("*.`'\" ")
    if len(stripped) == 1 and stripped.upper() in letters:
        return stripped.upper()
    for number, pattern in enumerate(_letter_patterns(letters)):
        found = re.findall(pattern, text)
        if found:
            return (found[0] if number < 2 else found[-1]).upper()
    lowered = text.lower()
    positions = []
    for i, choice in enumerate(choices):
        spots = [m.end() for m in re.finditer(rf"(?<!\w){re.escape(choice.lower())}(?!\w)", lowered)]
        if spots:
            positions.append((max(spots), -len(choice), letters[i]))
    return max(positions)[2] if positions else None


def is_correct(text: str, choices: tuple[str, ...], gold: str) -> bool:
    if choices:
        return extract_choice(text, choices) == gold
    value, target = extract_number(text), _to_decimal(gold)
    return value is not None and target is not None and value == target


# ---------------------------------------------------------------- narrowing options

_STOPWORDS = frozenset("a an the your you my to of for and or with on in at some".split())


def canonical_option(option: str) -> str:
    """Deterministic key that merges equivalent option strings across answers.

    NFKC, lower case, every non-alphanumeric run becomes a space, stopwords (a, an, the, your,
    you, my, to, of, for, and, or, with, on, in, at, some) dropped, a plural -s stripped from
    words longer than 3 letters (not -ss), then the remaining words sorted and joined by one space.
    "Buy the store brands!" and "store brand, buy" both become "brand buy store".
    """
    text = unicodedata.normalize("NFKC", option).lower()
    words = [w for w in re.split(r"[^0-9a-z]+", text) if w and w not in _STOPWORDS]
    words = [w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in words]
    return " ".join(sorted(words))
