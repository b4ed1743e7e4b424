"""A strict sliding-window provider for the rate-limit bench, written apart from prefray.fakellm.

It speaks enough of OpenAI's chat-completions API for the openai SDK (POST /v1/chat/completions,
`n` choices, usage) and knows nothing of the client that calls it. For each limited model it keeps
the arrival times of the requests it admitted; a request arriving when `rpm` of them fall in the
trailing `window` seconds (by the server's clock, at arrival) is refused with 429 and a Retry-After
of the seconds until the oldest of them leaves the window. An admitted request is answered after
the model's latency. Models not named in --limit answer at once, unlimited (a judge, say).

GET /stats: per limited model, the admitted arrivals (seconds on the server's clock), the answer
times, and the 429s; plus the unlimited models' request counts.

Usage: python bench/strict_window_server.py --port P --rpm 200 --limit MODEL_ID [--limit ...]
                                            [--latency 8] [--window 60]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import time
from collections import Counter, deque

from aiohttp import web

# A verdict any of BenchPreS's judge prompts can parse (applied, score, rationale).
JUDGE_TEXT = json.dumps({"applied": False, "score": 5, "rationale": "bench answer"})


class Window:
    """Admitted arrivals of one model in the trailing window: exact, by arrival time."""

    def __init__(self, rpm: int, width: float):
        self.rpm, self.width = rpm, width
        self.recent: deque[float] = deque()
        self.admitted: list[float] = []
        self.answered: list[float] = []
        self.refused = 0

    def admit(self, now: float) -> float:
        """0 if a request arriving `now` is admitted, else the seconds until one would be."""
        while self.recent and self.recent[0] <= now - self.width:
            self.recent.popleft()
        if len(self.recent) >= self.rpm:
            self.refused += 1
            return self.recent[0] + self.width - now
        self.recent.append(now)
        self.admitted.append(now)
        return 0.0


def reply(model: str, text: str, choices: int, prompt_tokens: int) -> dict:
    return {
        "id": f"chatcmpl-{next(COUNTER)}", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                     "logprobs": None} for i in range(choices)],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 8 * choices,
                  "total_tokens": prompt_tokens + 8 * choices},
    }


COUNTER = itertools.count(1)


def app(rpm: int, width: float, limited: list[str], latency: float) -> web.Application:
    windows = {model: Window(rpm, width) for model in limited}
    unlimited: Counter[str] = Counter()

    async def chat(request: web.Request) -> web.Response:
        now = time.monotonic()
        body = await request.json()
        model = body.get("model", "")
        prompt_tokens = sum(len(str(m.get("content", ""))) for m in body.get("messages", [])) // 4 + 1
        window = windows.get(model)
        if window is None:
            unlimited[model] += 1
            return web.json_response(reply(model, JUDGE_TEXT, int(body.get("n") or 1), prompt_tokens))
        wait = window.admit(now)
        if wait > 0:
            return web.json_response({"error": {"message": "rate limit: requests per minute", "type": "requests",
                                                "code": "rate_limit_exceeded"}},
                                     status=429, headers={"retry-after": str(math.ceil(wait)),
                                                          "retry-after-ms": str(math.ceil(wait * 1000))})
        await asyncio.sleep(latency)
        window.answered.append(time.monotonic())
        return web.json_response(reply(model, "A bench answer.", int(body.get("n") or 1), prompt_tokens))

    async def stats(_: web.Request) -> web.Response:
        return web.json_response({
            "limited": {model: {"admitted": w.admitted, "answered": w.answered, "refused": w.refused}
                        for model, w in windows.items()},
            "unlimited": dict(unlimited), "rpm": rpm, "window_s": width, "latency_s": latency})

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model"} for m in windows]})

    application = web.Application(client_max_size=64 * 2**20)
    application.add_routes([web.post("/v1/chat/completions", chat), web.get("/stats", stats),
                            web.get("/v1/models", models)])
    return application


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rpm", type=int, required=True)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--limit", action="append", required=True, help="a model id the rpm applies to")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before a limited model answers")
    args = parser.parse_args()
    web.run_app(app(args.rpm, args.window, args.limit, args.latency), host="127.0.0.1", port=args.port,
                print=None, backlog=4096)


if __name__ == "__main__":
    main()
