"""CPU per call of a gateway's provider: prefray's path (the JSON body it builds sent through the
SDK client's `post`, the answer read as JSON: engine/calls/providers/) against the SDK's typed
`create` with its raw response parsed into the SDK's model (how prefray sent before), for OpenAI
and Anthropic, in one process against one zero-latency fake server.

Each route sends the same judge-shaped requests (a system prompt, a ~600-token message, a JSON
schema, as BenchPreS's judge asks) at concurrency 32; what is measured is this process's CPU time
(`time.process_time`) over the calls, divided by the calls. The routes alternate, median of
`--repeats`; printed: ms of CPU a call for each, and prefray ÷ typed create.

Usage: python bench/provider_cpu.py [--calls 3000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from _common import ROOT, fake_server

sys.path.insert(0, str(ROOT))
from prefray.engine.calls.providers import build_provider  # noqa: E402
from prefray.engine.config.schema import ModelSpec  # noqa: E402
from prefray.engine.types import ChatRequest  # noqa: E402

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["verdicts", "reason"],
          "properties": {"reason": {"type": "string"},
                         "verdicts": {"type": "array", "items": {
                             "type": "object", "additionalProperties": False, "required": ["name", "applied"],
                             "properties": {"name": {"type": "string"}, "applied": {"type": "boolean"}}}}}}
CONCURRENCY = 32
# Not arguments of the Anthropic SDK's `create`: prefray sent them as its extra_body.
ANTHROPIC_BODY_ONLY = ("temperature", "top_p", "top_k", "seed")


def requests(count: int) -> list[ChatRequest]:
    text = "The user prefers a warm tone and short answers; the reply under judgment follows. " * 30
    return [ChatRequest(messages=({"role": "user", "content": f"Case {i}. {text}"},),
                        system="Judge whether each remembered preference was applied.",
                        params={"max_tokens": 300, "temperature": 0.0}, json_schema=SCHEMA, seed=i)
            for i in range(count)]


def typed_create(provider):
    """The SDK's typed call as prefray made it before: keyword arguments through `create`'s
    parameter transform, the raw response parsed into the SDK's pydantic model."""
    anthropic = not hasattr(provider.client, "chat")
    sdk = provider.client.messages if anthropic else provider.client.chat.completions

    async def call(request: ChatRequest):
        body = provider.wire_body(request)
        extra = {name: body.pop(name) for name in ANTHROPIC_BODY_ONLY if name in body} if anthropic else {}
        raw = await sdk.with_raw_response.create(**body, extra_body=extra or None)
        parsed = raw.parse()
        return await parsed if asyncio.iscoroutine(parsed) else parsed
    return call


async def cpu_per_call(call, batch: list[ChatRequest]) -> float:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(request: ChatRequest):
        async with gate:
            return await call(request)

    await asyncio.gather(*(one(r) for r in batch[:100]))   # connections open, first-call imports done
    began = time.process_time()
    await asyncio.gather(*(one(r) for r in batch))
    return (time.process_time() - began) / len(batch) * 1e3


async def measure(spec: ModelSpec, calls: int, repeats: int) -> dict[str, list[float]]:
    provider = build_provider(spec, "bench-key")
    routes = {"prefray": provider.complete, "typed create": typed_create(provider)}
    found: dict[str, list[float]] = {name: [] for name in routes}
    try:
        for _ in range(repeats):
            for name, call in routes.items():
                found[name].append(await cpu_per_call(call, requests(calls)))
    finally:
        await provider.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with fake_server() as port:
        for provider, url, model in (("openai", f"http://127.0.0.1:{port}/v1", "fake-judge"),
                                     ("anthropic", f"http://127.0.0.1:{port}", "fake-claude")):
            spec = ModelSpec(name=provider, provider=provider, model_id=model, base_url=url)
            found = asyncio.run(measure(spec, args.calls, args.repeats))
            ours, typed = (statistics.median(found[name]) for name in ("prefray", "typed create"))
            runs = "; ".join(f"{name} " + ", ".join(f"{x:.2f}" for x in xs) for name, xs in found.items())
            print(f"{provider}: prefray {ours:.2f} ms of CPU a call, the SDK's typed create {typed:.2f} ms: "
                  f"ratio {ours / typed:.3f} (median of {args.repeats}, {args.calls} calls each; runs: {runs})")


if __name__ == "__main__":
    main()
