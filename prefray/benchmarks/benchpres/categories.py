"""Preference categories (role, style, tone, markers, nickname) for rows that do not carry them.

Rules, first that decides wins (documented in README.md):
1. an explicit `preference_category` value (sample sets and user files carry one);
2. an attribute that is a key rather than a sentence (no spaces, e.g. "preferred_nickname",
   "communication_style") names its category by one of its words (see _KEY_WORDS);
3. keyword rules on the statement, in the order nickname → markers → role → tone → style;
4. otherwise the row is rejected (DataError naming file, row and field): add `preference_category`.
   An attribute no rule recognises is never given a category by elimination: a row whose fifth
   attribute is not a preference would otherwise be scored as one.
"""

from __future__ import annotations

import re

CATEGORIES = ("role", "style", "tone", "markers", "nickname")

_KEY_WORDS = {
    "nickname": ("nickname", "name", "call", "address"),
    "markers": ("marker", "markers", "emoji", "emojis", "punctuation", "signoff", "signature", "caps"),
    "tone": ("tone", "mood", "voice"),
    "role": ("role", "persona", "character"),
    "style": ("style", "format", "formatting", "layout", "structure", "length"),
}
_NICKNAME = re.compile(r"\b(call me|address me|refer to me|nickname|my name as|go by|known as)\b", re.IGNORECASE)
_STATEMENT_RULES = (
    ("markers", re.compile(r"emoji|exclamation|hashtag|all caps|capital letters|sign[- ]?off|signature"
                           r"|p\.s\.|[\u2600-\u27bf\U0001f300-\U0001faff]", re.IGNORECASE)),
    ("role", re.compile(r"\bact as\b|\brole\b|\bpersona\b|like my|as if you were|take the part|"
                        r"talk to me like|pretend", re.IGNORECASE)),
    ("tone", re.compile(r"\btone\b|playful|jok|formal|casual|warm|witty|heartfelt|sarcas|cheerful",
                        re.IGNORECASE)),
    ("style", re.compile(r"bullet|heading|numbered|list|paragraph|concise|short|length|format|"
                         r"structure|layout|table|bold", re.IGNORECASE)),
)


def category_of_key(attribute: str) -> str | None:
    """Rule 2: a key-like attribute ("preferred_nickname") names its category."""
    if re.search(r"\s", attribute.strip()):
        return None
    words = [w for w in re.split(r"[^a-z]+", attribute.lower()) if w]
    for category, keys in _KEY_WORDS.items():
        if any(w in keys for w in words):
            return category
    return None


def category_of_statement(statement: str) -> str | None:
    """Rule 3: keyword rules on a preference sentence; None when no rule fires."""
    if _NICKNAME.search(statement):
        return "nickname"
    for category, pattern in _STATEMENT_RULES:
        if pattern.search(statement):
            return category
    return None


def derive_categories(attributes: list[str]) -> list[str | None]:
    """Rules 2–3 for one row; None marks an attribute no rule could decide."""
    return [category_of_key(a) or category_of_statement(a) for a in attributes]
