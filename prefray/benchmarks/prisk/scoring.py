"""PRISK scoring: JSON schemas and parsers for routing and judge answers, answer extraction for
exact-match IRP items, and the canonical form of narrowing options."""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from typing import Any

from prefray.benchmarks.prisk.extraction import extract_choice, extract_number, read_answer  # noqa: F401
from prefray.sdk import ParseError

ROUTE_SCHEMA = {"type": "object", "properties": {"retrieve": {"type": "boolean"}},
                "required": ["retrieve"], "additionalProperties": False}
RATIONALE = {"type": "string", "maxLength": 600}
SCORE_SCHEMA = {"type": "object", "properties": {"rationale": RATIONALE,
                                                 "score": {"type": "integer", "minimum": 1, "maximum": 5}},
                "required": ["rationale", "score"], "additionalProperties": False}
OPTIONS_SCHEMA = {"type": "object", "properties": {"rationale": RATIONALE,
                                                   "options": {"type": "array", "items": {"type": "string"}}},
                  "required": ["rationale", "options"], "additionalProperties": False}
ATTRIBUTION_SCHEMA = {"type": "object", "properties": {"rationale": RATIONALE, "attributable": {"type": "boolean"}},
                      "required": ["rationale", "attributable"], "additionalProperties": False}


def useful_schema(count: int) -> dict[str, Any]:
    array = {"type": "array", "items": {"type": "boolean"}, "minItems": count, "maxItems": count}
    return {"type": "object", "properties": {"rationale": RATIONALE, "useful": array},
            "required": ["rationale", "useful"], "additionalProperties": False}


def merge_schema(count: int) -> dict[str, Any]:
    """One number per listed option: an option with the same meaning (its own number if none)."""
    array = {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": count},
             "minItems": count, "maxItems": count}
    return {"type": "object", "properties": {"rationale": RATIONALE, "same_as": array},
            "required": ["rationale", "same_as"], "additionalProperties": False}


def parse_merge(text: str) -> dict[str, list[int]]:
    data = first_json(text)
    links = data.get("same_as") if isinstance(data, dict) else data
    if not isinstance(links, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in links):
        raise ParseError(f"no list of option numbers in {text[:80]!r}")
    return {"same_as": links}


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


# ---------------------------------------------------------------- narrowing options

_STOPWORDS = frozenset("a an the your you my to of for and or with on in at some".split())


@functools.lru_cache(maxsize=1 << 16)   # the same option recurs across samples, models and conditions
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
