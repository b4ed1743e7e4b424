"""Read the rate-limit headers providers send with every answer.

OpenAI: `x-ratelimit-limit-requests`, `x-ratelimit-remaining-requests`, `x-ratelimit-reset-requests`
(a duration such as "1s", "6m0s", "250ms"), and the same for `-tokens`.
Anthropic: `anthropic-ratelimit-requests-limit`, `-remaining`, `-reset` (an RFC 3339 time), and the
same for `-input-tokens`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
# Header names worth keeping from a reply (everything the lane learns from).
RATE_HEADER_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")


@dataclass(frozen=True)
class RateHeaders:
    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests_s: float | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None


def duration_seconds(text: str) -> float | None:
    """ "6m0s" → 360.0, "250ms" → 0.25, "1.5s" → 1.5; None when unreadable."""
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def seconds_until(stamp: str, now: datetime | None = None) -> float | None:
    """Seconds from now until an RFC 3339 time; None when unreadable."""
    try:
        moment = datetime.fromisoformat(stamp.strip().replace("Z", "+00:00"))
    except ValueError:
        return duration_seconds(stamp)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, (moment - (now or datetime.now(UTC))).total_seconds())


def _int(headers: Mapping[str, str], name: str) -> int | None:
    value = headers.get(name)
    try:
        return int(float(value)) if value not in (None, "") else None
    except ValueError:
        return None


def rate_headers_subset(headers: Mapping[str, str] | None) -> dict[str, str]:
    """Only the rate-limit headers of a reply, with lower-case names."""
    if not headers:
        return {}
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith(RATE_HEADER_PREFIXES)}


def read_rate_headers(headers: Mapping[str, str]) -> RateHeaders:
    headers = {k.lower(): v for k, v in headers.items()}
    if "anthropic-ratelimit-requests-limit" in headers or "anthropic-ratelimit-requests-remaining" in headers:
        reset = headers.get("anthropic-ratelimit-requests-reset")
        return RateHeaders(
            limit_requests=_int(headers, "anthropic-ratelimit-requests-limit"),
            remaining_requests=_int(headers, "anthropic-ratelimit-requests-remaining"),
            reset_requests_s=seconds_until(reset) if reset else None,
            limit_tokens=_int(headers, "anthropic-ratelimit-input-tokens-limit"),
            remaining_tokens=_int(headers, "anthropic-ratelimit-input-tokens-remaining"),
        )
    reset = headers.get("x-ratelimit-reset-requests")
    return RateHeaders(
        limit_requests=_int(headers, "x-ratelimit-limit-requests"),
        remaining_requests=_int(headers, "x-ratelimit-remaining-requests"),
        reset_requests_s=duration_seconds(reset) if reset else None,
        limit_tokens=_int(headers, "x-ratelimit-limit-tokens"),
        remaining_tokens=_int(headers, "x-ratelimit-remaining-tokens"),
    )
