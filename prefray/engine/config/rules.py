"""Rules for single config values: what a key accepts, said in words a user can act on.

A rule checks one value and carries the text that names what is allowed; the schema attaches one
rule to every key, the validator reports `key=value: allowed is ...` for the first value that
breaks it, and the docs' key table is printed from the same rules.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse


@dataclass(frozen=True)
class Rule:
    """What one key accepts: a check and its description (`nullable`: null is accepted too)."""

    allowed: str
    check: Callable[[Any], bool]
    nullable: bool = False

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        try:
            return bool(self.check(value))
        except (TypeError, ValueError):
            return False

    def describe(self) -> str:
        return f"{self.allowed}, or null" if self.nullable and "null" not in self.allowed else self.allowed

    def or_null(self, meaning: str = "") -> Rule:
        text = f"{self.allowed}, or null" + (f" ({meaning})" if meaning else "")
        return Rule(text, self.check, nullable=True)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """A finite int or float (not a bool, NaN or infinity)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fmt(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


def integer(minimum: int | None = None, maximum: int | None = None) -> Rule:
    """An integer; `minimum`/`maximum` inclusive."""
    parts = ([f">= {minimum}"] if minimum is not None else []) + ([f"<= {maximum}"] if maximum is not None else [])
    text = "an integer" + (" " + " and ".join(parts) if parts else "")
    return Rule(text, lambda v: _is_int(v) and (minimum is None or v >= minimum) and (maximum is None or v <= maximum))


def number(minimum: float | None = None, maximum: float | None = None, above: float | None = None) -> Rule:
    """A number; `minimum`/`maximum` inclusive, `above` exclusive."""
    parts = []
    if above is not None:
        parts.append(f"> {_fmt(above)}")
    if minimum is not None:
        parts.append(f">= {_fmt(minimum)}")
    if maximum is not None:
        parts.append(f"<= {_fmt(maximum)}")
    text = "a number" + (" " + " and ".join(parts) if parts else "")

    def check(v: Any) -> bool:
        return (_is_number(v) and (above is None or v > above) and (minimum is None or v >= minimum)
                and (maximum is None or v <= maximum))

    return Rule(text, check)


def boolean() -> Rule:
    return Rule("true or false", lambda v: isinstance(v, bool))


def text(pattern: str | None = None, what: str = "a non-empty string") -> Rule:
    compiled = re.compile(pattern) if pattern else None
    return Rule(what, lambda v: isinstance(v, str) and v.strip() != ""
                and (compiled is None or compiled.fullmatch(v) is not None))


def choice(*options: str) -> Rule:
    return Rule("one of " + " | ".join(options), lambda v: isinstance(v, str) and v in options)


def url() -> Rule:
    """An http(s) URL with a host and, if it names one, a port from 0 to 65535 (0: a model prefray
    serves itself picks a free port; see config.validate for where 0 is allowed)."""

    def check(v: Any) -> bool:
        parsed = urlparse(v) if isinstance(v, str) else None
        if not (parsed and parsed.scheme in ("http", "https") and parsed.hostname):
            return False
        parsed.port   # noqa: B018 - raises ValueError for a port outside 0-65535 or not a number
        return True

    return Rule("an http(s) URL with a host and a port from 1 to 65535 if any, e.g. http://127.0.0.1:8765/v1", check)


def path() -> Rule:
    return Rule("a file system path", lambda v: isinstance(v, str) and v.strip() != "" and "\0" not in v)


def mapping(what: str) -> Rule:
    return Rule(what, lambda v: isinstance(v, dict))


def render(value: Any) -> str:
    """A value as the user would type it in an override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value.strip() and value == value.strip() else repr(value)
    return str(value)
