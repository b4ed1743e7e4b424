"""A fake OpenAI/Anthropic provider over real HTTP, for tests and dry runs.

Routes: POST /v1/chat/completions (OpenAI), POST /v1/messages (Anthropic), GET /v1/models,
GET /stats, GET /requests (the latest request bodies, for tests), POST /reset, and both batch APIs
(batches.py). Answers come from `answers.py`; limits answer 429 with retry-after; faults (429, 500,
malformed bodies, timeouts) can be injected on a chosen share of requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from aiohttp import web

from prefray.fakellm import answers
from prefray.fakellm.batches import BatchOptions, FakeBatches
from prefray.fakellm.prompt_cache import PromptCache

FAULT_KINDS = ("429", "500", "malformed", "timeout")
REQUEST_LOG_SIZE = 1000  # request bodies kept for GET /requests


@dataclass
class FakeOptions:
    latency_s: float = 0.0
    model_latency_s: dict[str, float] = field(default_factory=dict)  # model id -> seconds, instead of latency_s
    # Latencies drawn lognormal: the latency above is the median, this the sigma of its logarithm
    # (0 = fixed); each request's draw follows from its body, so a request repeated waits the same.
    latency_sigma: float = 0.0
    rpm: float | None = None
    tpm: float | None = None
    limited_models: tuple[str, ...] = ()  # models the rpm/tpm limits apply to (empty = all)
    # model id -> (rpm, tpm): that model's own limits instead of rpm/tpm (None = no limit)
    model_limits: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    fault_rate: float = 0.0          # share of distinct requests that fail on their first arrival
    sticky_fault_rate: float = 0.0   # share of distinct requests that fail every time
    faults: tuple[str, ...] = ("429", "500", "malformed")
    fault_retry_after_s: float = 0.2
    timeout_fault_s: float = 30.0
    model_version_suffix: str = "-fake-2026-01"
    rejected: dict[str, int] = field(default_factory=dict)  # model id -> HTTP status (401, 403, 404) always
    inflate_input: float = 1.0       # report (and count) this many times the real input tokens
    context_tokens: int | None = None  # prompts above this many input tokens are refused (HTTP 400)
    # Enforce rpm as a strict sliding window of this many seconds (at most rpm × window / 60 requests
    # in any window), as strict providers do; None = a token bucket with one second of burst.
    strict_window_s: float | None = None
    batch: BatchOptions = field(default_factory=BatchOptions)  # batch APIs (batches.py)
    cache_lifetime_s: float = 300.0   # prompt cache: how long a prefix is kept after its last use
    cache_min_tokens: int = 1024      # prompt cache: the shortest prefix cached (prompt_cache.py)


class TokenBucket:
    """Server-side limit: refills at `rate`/s up to `capacity`; one extra unit of slack absorbs
    loopback jitter between a client limiter of the same rate and this one."""

    def __init__(self, per_minute: float, window_s: float):
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate * window_s) + 1.0
        self.level = self.capacity
        self.stamp = time.monotonic()

    def take(self, amount: float) -> float:
        """Take `amount`; return 0 on success, else seconds until it would fit."""
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now
        amount = min(amount, self.capacity)
        if self.level >= amount:
            self.level -= amount
            return 0.0
        return (amount - self.level) / self.rate


class SlidingWindow:
    """Strict limit: at most `per_minute × window / 60` admissions in any `window` seconds."""

    def __init__(self, per_minute: float, window_s: float):
        self.window = window_s
        self.allowed = max(1, int(per_minute * window_s / 60.0))
        self.stamps: deque[float] = deque()

    def take(self, amount: float) -> float:
        now = time.monotonic()
        while self.stamps and self.stamps[0] <= now - self.window:
            self.stamps.popleft()
        if len(self.stamps) < self.allowed:
            self.stamps.append(now)
            return 0.0
        return self.stamps[0] + self.window - now


@dataclass
class Stats:
    generation_requests: int = 0
    answered: int = 0
    rate_limited: int = 0
    faults: int = 0
    structured_requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    by_model: Counter = field(default_factory=Counter)
    by_route: Counter = field(default_factory=Counter)
    input_tokens_by_model: Counter = field(default_factory=Counter)
    output_tokens_by_model: Counter = field(default_factory=Counter)
    # "model=N": how many requests arrived with an output budget of N tokens (what was asked for)
    max_tokens_by_model: Counter = field(default_factory=Counter)
    truncated: int = 0
    context_overflows: int = 0
    # prompt caching (prompt_cache.py): input tokens read from and written to the cache, and the
    # requests that carried a prompt_cache_key or a cache_control breakpoint
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    prompt_cache_keys: int = 0
    cache_control_requests: int = 0
    cache_read_tokens_by_model: Counter = field(default_factory=Counter)
    cache_write_tokens_by_model: Counter = field(default_factory=Counter)
    # chat requests answered whose model, messages, seed and schema had been answered before to a
    # caller still connected (a harness that resumes after a kill and asks again what it had been
    # answered: bench/peer_inspect.py; an answer computed after its caller hung up is not counted)
    answered_again: int = 0
    answered_again_first_at: list = field(default_factory=list)   # when each repeated one was first answered
    # per model: wall-clock time of the first and the last request admitted (not refused by a limit)
    first_admitted_at: dict = field(default_factory=dict)
    last_admitted_at: dict = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if not isinstance(v, Counter)}
        data["requests"] = self.generation_requests
        for name, value in self.__dict__.items():
            if isinstance(value, Counter):
                data[name] = dict(value)
        return data


class FakeProvider:
    def __init__(self, options: FakeOptions):
        self.options = options
        self.stats = Stats()
        self.seen: Counter = Counter()
        self.answered_keys: dict[str, float] = {}   # digest of each chat request answered: when (answered_again)
        self.request_log: deque = deque(maxlen=REQUEST_LOG_SIZE)
        # Limits apply per model id, as providers apply them per model and key.
        self.request_buckets: dict[str, TokenBucket] = {}
        self.token_buckets: dict[str, TokenBucket] = {}
        self.batches = FakeBatches(self)  # OpenAI files/batches and Anthropic message batches
        self.prompt_cache = PromptCache(options.cache_lifetime_s, options.cache_min_tokens)

    # -- policy ---------------------------------------------------------------------------
    def _fault_for(self, body_hash: str) -> str | None:
        arrivals = self.seen[body_hash]
        self.seen[body_hash] += 1
        share = int(body_hash[:8], 16) / 0xFFFFFFFF
        kinds = self.options.faults
        kind = kinds[int(body_hash[8:12], 16) % len(kinds)] if kinds else None
        if share < self.options.sticky_fault_rate:
            return kind
        lower = self.options.sticky_fault_rate
        if arrivals == 0 and lower <= share < lower + self.options.fault_rate:
            return kind
        return None

    def _limit(self, model: str, input_tokens: int) -> float:
        wait = 0.0
        if self.options.limited_models and model not in self.options.limited_models:
            return wait
        rpm, tpm = self.options.model_limits.get(model, (self.options.rpm, self.options.tpm))
        if rpm:
            bucket = self.request_buckets.get(model)
            if bucket is None:
                window = self.options.strict_window_s
                bucket = self.request_buckets[model] = (SlidingWindow(rpm, window) if window
                                                        else TokenBucket(rpm, 1.0))
            wait = bucket.take(1)
        if wait == 0.0 and tpm:
            bucket = self.token_buckets.setdefault(model, TokenBucket(tpm, 6.0))
            wait = bucket.take(input_tokens)
        return wait

    def _latency(self, model: str, body_hash: str) -> float:
        """Seconds this request waits: the model's latency, or a lognormal draw around it."""
        median = self.options.model_latency_s.get(model, self.options.latency_s)
        if not median or not self.options.latency_sigma:
            return median
        share = (int(body_hash[12:20], 16) + 0.5) / 16**8      # uniform in (0, 1), from the body
        return median * math.exp(self.options.latency_sigma * NormalDist().inv_cdf(share))

    async def _admit(self, body: dict[str, Any], input_tokens: int, anthropic: bool = False) -> web.Response | None:
        """Count (and log) the request; return an error response if a limit or fault applies."""
        self.request_log.append(body)
        self.stats.generation_requests += 1
        self.stats.by_model[str(body.get("model"))] += 1
        status = self.options.rejected.get(str(body.get("model")))
        if status is not None:
            return web.json_response({"error": {"message": f"injected {status}", "type": "invalid_request_error"}},
                                     status=status)
        budget = _output_budget(body)
        if budget is not None:
            self.stats.max_tokens_by_model[f"{body.get('model')}={budget}"] += 1
        limit = self.options.context_tokens
        if limit is not None and input_tokens > limit:
            self.stats.context_overflows += 1
            return _context_overflow(input_tokens, limit, anthropic)
        wait = self._limit(str(body.get("model")), input_tokens)
        if wait > 0:
            self.stats.rate_limited += 1
            return _too_many(wait)
        model = str(body.get("model"))
        self.stats.first_admitted_at.setdefault(model, time.time())
        self.stats.last_admitted_at[model] = time.time()
        body_hash = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        fault = self._fault_for(body_hash)
        if fault is None:
            latency = self._latency(model, body_hash)
            if latency:
                await asyncio.sleep(latency)
            return None
        self.stats.faults += 1
        if fault == "429":
            return _too_many(self.options.fault_retry_after_s)
        if fault == "500":
            return web.json_response({"error": {"message": "injected server error", "type": "server_error"}},
                                     status=500)
        if fault == "timeout":
            await asyncio.sleep(self.options.timeout_fault_s)
            return web.json_response({"error": {"message": "late"}}, status=504)
        return web.Response(text='{"id": "broken", "choices": [', content_type="application/json")

    # -- routes ---------------------------------------------------------------------------
    async def chat_completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.stats.by_route["chat.completions"] += 1
        messages = body.get("messages", [])
        input_tokens = sum(answers.count_tokens(answers.content_text(m.get("content"))) for m in messages)
        use = self.prompt_cache.openai(str(body.get("model")), messages, input_tokens)   # looked up on arrival
        refusal = await self._admit(body, input_tokens)
        if refusal is not None:
            return refusal
        self.prompt_cache.answered(use)   # ... and kept once the answer is computed
        input_tokens = int(input_tokens * self.options.inflate_input)
        schema = _openai_schema(body)
        base_seed = body.get("seed")
        choices = []
        for index in range(int(body.get("n") or 1)):
            seed = base_seed if index == 0 else (base_seed or 0) + index
            text, cut = self._cut(self._answer(messages, seed, schema), _output_budget(body))
            choices.append({"index": index, "message": {"role": "assistant", "content": text},
                            "finish_reason": "length" if cut else "stop"})
        output_tokens = sum(answers.count_tokens(c["message"]["content"]) for c in choices)
        self._count_answer(str(body.get("model")), input_tokens, output_tokens, schema)
        if request.transport is not None and not request.transport.is_closing():
            self._note_answered(body, schema)   # a caller that hung up while it waited got no answer
        self.stats.prompt_cache_keys += bool(body.get("prompt_cache_key"))
        cached = use.read
        self.stats.cache_read_tokens += cached
        self.stats.cache_read_tokens_by_model[str(body.get("model"))] += cached
        return web.json_response(headers=self._rate_headers(str(body.get("model")), anthropic=False), data={
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
            "model": f"{body.get('model')}{self.options.model_version_suffix}", "choices": choices,
            "usage": {"prompt_tokens": input_tokens, "completion_tokens": output_tokens,
                      "total_tokens": input_tokens + output_tokens,
                      "prompt_tokens_details": {"cached_tokens": cached}},
        })

    async def messages(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.stats.by_route["messages"] += 1
        messages = body.get("messages", [])
        system = answers.content_text(body.get("system") or "")
        input_tokens = answers.count_tokens(system) + sum(
            answers.count_tokens(answers.content_text(m.get("content"))) for m in messages)
        use = self.prompt_cache.anthropic(str(body.get("model")), body.get("system"), messages)
        refusal = await self._admit(body, input_tokens, anthropic=True)
        if refusal is not None:
            return refusal
        self.prompt_cache.answered(use)
        input_tokens = int(input_tokens * self.options.inflate_input)
        schema = ((body.get("output_config") or {}).get("format") or {}).get("schema")
        refused = _refused_keyword(schema)
        if refused is not None:  # as Anthropic does: its structured output has no such keyword
            message = f"output_config.format.schema: property '{refused}' is not supported"
            return web.json_response({"type": "error", "error": {"type": "invalid_request_error", "message": message}},
                                     status=400)
        text, cut = self._cut(self._answer(messages, body.get("seed"), schema), _output_budget(body))
        output_tokens = answers.count_tokens(text)
        self._count_answer(str(body.get("model")), input_tokens, output_tokens, schema)
        read = min(use.read, input_tokens)
        written = min(use.written, input_tokens - read)
        self.stats.cache_read_tokens += read
        self.stats.cache_write_tokens += written
        self.stats.cache_read_tokens_by_model[str(body.get("model"))] += read
        self.stats.cache_write_tokens_by_model[str(body.get("model"))] += written
        self.stats.cache_control_requests += _has_breakpoint(body)
        return web.json_response(headers=self._rate_headers(str(body.get("model")), anthropic=True), data={
            "id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant",
            "model": f"{body.get('model')}{self.options.model_version_suffix}",
            "content": [{"type": "text", "text": text}], "stop_reason": "max_tokens" if cut else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens - read - written, "output_tokens": output_tokens,
                      "cache_read_input_tokens": read, "cache_creation_input_tokens": written},
        })

    def _rate_headers(self, model: str, anthropic: bool) -> dict[str, str]:
        """The providers' rate-limit headers, when this server limits requests for the model."""
        bucket = self.request_buckets.get(model)
        if not self.options.rpm or bucket is None:
            return {}
        limit = int(self.options.rpm)
        if isinstance(bucket, SlidingWindow):
            remaining = max(0, bucket.allowed - len(bucket.stamps))
        else:
            remaining = max(0, int(bucket.level))
        if anthropic:
            return {"anthropic-ratelimit-requests-limit": str(limit),
                    "anthropic-ratelimit-requests-remaining": str(remaining),
                    "anthropic-ratelimit-requests-reset": time.strftime(
                        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1))}
        return {"x-ratelimit-limit-requests": str(limit), "x-ratelimit-remaining-requests": str(remaining),
                "x-ratelimit-reset-requests": "1s"}

    def _cut(self, text: str, budget: int | None) -> tuple[str, bool]:
        """An answer longer than the request's output budget is cut to it (4 characters a token)."""
        if budget is None or answers.count_tokens(text) <= budget:
            return text, False
        self.stats.truncated += 1
        return text[: max(0, budget) * 4], True

    def _answer(self, messages: list[dict[str, Any]], seed: int | None, schema: dict[str, Any] | None) -> str:
        if schema is not None:
            return answers.render_json(answers.answer_json(schema, messages, seed))
        return answers.answer_text(messages, seed)

    def _count_answer(self, model: str, input_tokens: int, output_tokens: int, schema: dict[str, Any] | None) -> None:
        self.stats.answered += 1
        self.stats.input_tokens += input_tokens
        self.stats.output_tokens += output_tokens
        self.stats.input_tokens_by_model[model] += input_tokens
        self.stats.output_tokens_by_model[model] += output_tokens
        self.stats.structured_requests += schema is not None

    def _note_answered(self, body: dict[str, Any], schema: dict[str, Any] | None) -> None:
        """Count an answer to a question answered before: same model, messages, seed and schema
        (what decides the answer; other fields may differ between harnesses)."""
        asked = [body.get("model"), body.get("messages"), body.get("seed"), schema, body.get("n")]
        key = hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()
        if key in self.answered_keys:
            self.stats.answered_again += 1
            self.stats.answered_again_first_at.append(self.answered_keys[key])
        else:
            self.answered_keys[key] = time.time()

    async def get_stats(self, request: web.Request) -> web.Response:
        return web.json_response({**self.stats.as_json(), **self.batches.stats_json()})

    async def get_requests(self, request: web.Request) -> web.Response:
        return web.json_response(list(self.request_log))

    async def reset(self, request: web.Request) -> web.Response:
        self.stats = Stats()
        self.request_log.clear()
        self.seen.clear()
        self.answered_keys.clear()
        self.batches.reset()
        self.prompt_cache.clear()
        return web.json_response({"reset": True})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes([
            web.post("/v1/chat/completions", self.chat_completions),
            web.post("/v1/messages", self.messages),
            web.get("/v1/models", self.models),
            web.get("/stats", self.get_stats),
            web.get("/requests", self.get_requests),
            web.post("/reset", self.reset),
            web.get("/health", self.health),
            *self.batches.routes(),
        ])
        return app


def _has_breakpoint(body: dict[str, Any]) -> bool:
    """Whether an Anthropic request marks any block with `cache_control`."""
    contents = [body.get("system"), *(m.get("content") for m in body.get("messages", []))]
    return any(isinstance(block, dict) and "cache_control" in block
               for content in contents if isinstance(content, list) for block in content)


def _openai_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return (fmt.get("json_schema") or {}).get("schema")
    return None


def _refused_keyword(schema: Any) -> str | None:
    """The first keyword Anthropic's structured output refuses in `schema`, if any."""
    from prefray.engine.calls.providers.schema_subset import REFUSED

    if isinstance(schema, list):
        return next((k for k in map(_refused_keyword, schema) if k), None)
    if not isinstance(schema, dict):
        return None
    for key, value in schema.items():
        if key in REFUSED or (key == "minItems" and isinstance(value, int) and value > 1):
            return key
        found = _refused_keyword(list(value.values()) if key == "properties" else value)
        if found:
            return found
    return None


def _output_budget(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        if body.get(key) is not None:
            return int(body[key])
    return None


def _context_overflow(input_tokens: int, limit: int, anthropic: bool) -> web.Response:
    """The refusal real providers send for a prompt longer than the context window."""
    if anthropic:
        error = {"type": "error", "error": {"type": "invalid_request_error",
                                             "message": f"prompt is too long: {input_tokens} tokens > {limit} maximum"}}
    else:
        error = {"error": {"message": f"This model's maximum context length is {limit} tokens. However, your "
                           f"messages resulted in {input_tokens} tokens.", "type": "invalid_request_error",
                           "param": "messages", "code": "context_length_exceeded"}}
    return web.json_response(error, status=400)


def _too_many(wait_s: float) -> web.Response:
    headers = {"retry-after": str(max(1, math.ceil(wait_s))), "retry-after-ms": str(int(wait_s * 1000) + 1)}
    return web.json_response({"error": {"message": "rate limit exceeded", "type": "rate_limit_error"}},
                             status=429, headers=headers)


class RunningServer:
    """A fake server started inside the current event loop."""

    def __init__(self, runner: web.AppRunner, provider: FakeProvider):
        self.runner = runner
        self.provider = provider

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start(host: str, port: int, options: FakeOptions | None = None) -> RunningServer:
    provider = FakeProvider(options or FakeOptions())
    runner = web.AppRunner(provider.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return RunningServer(runner, provider)


async def serve(host: str, port: int) -> tuple[RunningServer, int]:
    """The `prefray.servers` entry point `fakellm` (a model with `serve: fakellm`): the server,
    with default options, and the port it answers on (a free one when `port` is 0)."""
    server = await start(host, port)
    return server, server.runner.addresses[0][1]
