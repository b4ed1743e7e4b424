"""JSON schemas in the subset Anthropic's structured output accepts.

Anthropic compiles an output schema into a grammar and refuses numeric bounds, string lengths and
array counts other than 0 or 1 (HTTP 400), and wants `additionalProperties: false` on every object.
This module drops what it refuses and states each dropped bound in the property's description
("Bounds: minimum=1, maximum=5."), so the model still reads it; every benchmark's parser checks the
bounds again after the answer, as it does for any provider.
"""

from __future__ import annotations

from typing import Any

REFUSED = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
           "maxLength", "maxItems", "uniqueItems", "minProperties", "maxProperties")
BOUNDS_PREFIX = "Bounds: "


def anthropic_schema(schema: Any) -> Any:
    """A copy of `schema` that Anthropic accepts (see the module docstring)."""
    if isinstance(schema, list):
        return [anthropic_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    dropped: dict[str, Any] = {}
    for key, value in schema.items():
        if key in REFUSED or (key == "minItems" and isinstance(value, int) and value > 1):
            dropped[key] = value
        elif key in ("properties", "$defs", "definitions"):
            out[key] = {name: anthropic_schema(sub) for name, sub in value.items()}
        else:
            out[key] = anthropic_schema(value)
    if out.get("type") == "object" or "properties" in out:
        out.setdefault("additionalProperties", False)
    if dropped:
        stated = ", ".join(f"{k}={v}" for k, v in dropped.items())
        out["description"] = (str(out.get("description", "")) + f" {BOUNDS_PREFIX}{stated}.").strip()
    return out


def stated_bounds(schema: dict[str, Any]) -> dict[str, Any]:
    """The bounds `anthropic_schema` moved into a description, as numbers (for readers of it)."""
    text = str(schema.get("description", ""))
    if BOUNDS_PREFIX not in text:
        return {}
    stated = text.split(BOUNDS_PREFIX, 1)[1].rstrip(".")
    out: dict[str, Any] = {}
    for part in stated.split(","):
        name, _, value = part.strip().partition("=")
        try:
            out[name] = int(value) if value.lstrip("-").isdigit() else float(value)
        except ValueError:
            out[name] = value
    return out
