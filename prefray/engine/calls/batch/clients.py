"""The two provider batch APIs through the official SDKs: submit, poll, read results.

OpenAI: the requests go up as a JSONL file (purpose "batch"), one line
`{custom_id, method: POST, url: /v1/chat/completions, body}` each; `batches.create` starts the
batch (completion window 24h); it ends as completed, expired, failed or cancelled, with answers in
its output file and failures in its error file (`files.content`).
Anthropic: `messages.batches.create(requests=[{custom_id, params}])`; it ends when its
`processing_status` is "ended"; `messages.batches.results` streams one JSONL line per request.
Request bodies are built by the interactive providers, so both tiers send the same request.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Protocol

from prefray.engine.calls.batch.results import anthropic_line, failed, missing, openai_line
from prefray.engine.calls.providers.base import sdk_errors
from prefray.engine.types import CallResult, ChatRequest, ModelSpec

OPENAI_ENDPOINT = "/v1/chat/completions"
OPENAI_ENDED = ("completed", "expired", "failed", "cancelled")


@dataclass
class Submitted:
    batch_id: str
    input_file_id: str | None = None


@dataclass
class Progress:
    ended: bool
    status: str


class BatchClient(Protocol):
    async def submit(self, items: list[tuple[str, ChatRequest]]) -> Submitted: ...

    async def progress(self, batch_id: str) -> Progress: ...

    async def results(self, batch_id: str, custom_ids: list[str], started: float) -> dict[str, CallResult]: ...

    async def close(self) -> None: ...


class OpenAIBatches:
    def __init__(self, spec: ModelSpec, api_key: str):
        import openai

        from prefray.engine.calls.providers.openai_chat import OpenAIChat

        self.sdk = openai
        self.spec = spec
        self.chat = OpenAIChat(spec, api_key)
        self.client = self.chat.client

    def line(self, custom_id: str, request: ChatRequest) -> dict[str, Any]:
        return {"custom_id": custom_id, "method": "POST", "url": OPENAI_ENDPOINT,
                "body": self.chat.wire_body(request)}

    async def submit(self, items: list[tuple[str, ChatRequest]]) -> Submitted:
        data = "".join(json.dumps(self.line(cid, r), ensure_ascii=False) + "\n" for cid, r in items).encode()
        async with sdk_errors(self.sdk):
            upload = await self.client.files.create(file=("prefray-batch.jsonl", data, "application/jsonl"),
                                                    purpose="batch")
            batch = await self.client.batches.create(input_file_id=upload.id, endpoint=OPENAI_ENDPOINT,
                                                     completion_window="24h", metadata={"origin": "prefray"})
        return Submitted(batch.id, upload.id)

    async def progress(self, batch_id: str) -> Progress:
        async with sdk_errors(self.sdk):
            batch = await self.client.batches.retrieve(batch_id)
        return Progress(batch.status in OPENAI_ENDED, batch.status)

    async def _lines(self, file_id: str | None) -> list[dict[str, Any]]:
        if not file_id:
            return []
        async with sdk_errors(self.sdk):
            content = await self.client.files.content(file_id)
        return [json.loads(line) for line in content.text.splitlines() if line.strip()]

    async def results(self, batch_id: str, custom_ids: list[str], started: float) -> dict[str, CallResult]:
        async with sdk_errors(self.sdk):
            batch = await self.client.batches.retrieve(batch_id)
        lines = await self._lines(batch.output_file_id) + await self._lines(batch.error_file_id)
        wanted = set(custom_ids)
        now = time.time()
        out = {line["custom_id"]: openai_line(self.spec, line, started, now)
               for line in lines if line.get("custom_id") in wanted}
        why = batch.status
        if batch.status == "failed" and batch.errors and batch.errors.data:
            why = "batch failed: " + "; ".join(f"{e.code}: {e.message}" for e in batch.errors.data)[:300]
            return {cid: failed("client_error", why, started, now) for cid in custom_ids}
        if batch.status == "expired":
            return {cid: out.get(cid) or openai_line(self.spec, {"error": {"code": "batch_expired",
                                                                          "message": "window closed"}},
                                                     started, now) for cid in custom_ids}
        return {cid: out.get(cid) or missing(started, now, why) for cid in custom_ids}

    async def close(self) -> None:
        await self.client.close()


class AnthropicBatches:
    def __init__(self, spec: ModelSpec, api_key: str):
        import anthropic

        from prefray.engine.calls.providers.anthropic_messages import AnthropicMessages

        self.sdk = anthropic
        self.spec = spec
        self.messages = AnthropicMessages(spec, api_key)
        self.client = self.messages.client

    async def submit(self, items: list[tuple[str, ChatRequest]]) -> Submitted:
        requests = [{"custom_id": cid, "params": self.messages.wire_body(r)} for cid, r in items]
        async with sdk_errors(self.sdk):
            batch = await self.client.messages.batches.create(requests=requests)
        return Submitted(batch.id)

    async def progress(self, batch_id: str) -> Progress:
        async with sdk_errors(self.sdk):
            batch = await self.client.messages.batches.retrieve(batch_id)
        return Progress(batch.processing_status == "ended", batch.processing_status)

    async def results(self, batch_id: str, custom_ids: list[str], started: float) -> dict[str, CallResult]:
        out: dict[str, CallResult] = {}
        wanted = set(custom_ids)
        async with sdk_errors(self.sdk):
            stream = await self.client.messages.batches.results(batch_id)
            async for item in stream:
                if item.custom_id in wanted:
                    out[item.custom_id] = anthropic_line(self.spec, item.model_dump(mode="json"), started,
                                                         time.time())
        now = time.time()
        return {cid: out.get(cid) or missing(started, now) for cid in custom_ids}

    async def close(self) -> None:
        await self.client.close()


def batch_client(spec: ModelSpec, api_key: str) -> BatchClient:
    if spec.provider == "openai":
        return OpenAIBatches(spec, api_key)
    if spec.provider == "anthropic":
        return AnthropicBatches(spec, api_key)
    raise ValueError(f"model '{spec.name}': no batch API for provider '{spec.provider}'")
