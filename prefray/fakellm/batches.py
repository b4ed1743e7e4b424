"""The fake provider's batch APIs, answered by the same rule as its interactive routes.

OpenAI: POST /v1/files (multipart, purpose "batch"), GET /v1/files/{id}, GET /v1/files/{id}/content,
POST /v1/batches, GET /v1/batches/{id}, POST /v1/batches/{id}/cancel. A batch's answers go to its
output file, failed requests (non-200) and expired ones to its error file.
Anthropic: POST /v1/messages/batches, GET /v1/messages/batches/{id}, GET .../{id}/results (JSONL),
POST .../{id}/cancel.

A batch ends `delay_s` seconds after it was created (checked whenever it is looked at); the first
`expire_first` batches expire instead, answering nothing; a share `fail_rate` of distinct request
bodies fail (HTTP 500 / api_error) the first time any batch carries them. Counts go to /stats:
batches_created, batch_requests, batch_repeated_requests (a body an earlier batch carried),
batch_answered, batch_failed, batch_expired, batch_results_read, files_uploaded and batch tokens
per model. Rate limits and injected HTTP faults of the interactive routes do not apply.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from prefray.fakellm import answers

CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
WINDOW_S = 24 * 3600


@dataclass
class BatchOptions:
    delay_s: float = 0.0      # seconds from creation until a batch ends
    fail_rate: float = 0.0    # share of distinct request bodies that fail on their first batch
    expire_first: int = 0     # the first N batches created expire without answering


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch-delay", type=float, default=0.0, help="seconds until a batch ends")
    parser.add_argument("--batch-fail-rate", type=float, default=0.0,
                        help="share of distinct batch requests that fail on their first batch")
    parser.add_argument("--batch-expire-first", type=int, default=0,
                        help="the first N batches created expire without answering")


def options_from(args: argparse.Namespace) -> BatchOptions:
    return BatchOptions(delay_s=args.batch_delay, fail_rate=args.batch_fail_rate, expire_first=args.batch_expire_first)


@dataclass
class BatchStats:
    batches_created: int = 0
    batch_requests: int = 0
    batch_repeated_requests: int = 0
    batch_answered: int = 0
    batch_failed: int = 0
    batch_expired: int = 0
    batch_truncated: int = 0
    batch_results_read: int = 0
    files_uploaded: int = 0
    batches_by_api: Counter = field(default_factory=Counter)
    batch_input_tokens_by_model: Counter = field(default_factory=Counter)
    batch_output_tokens_by_model: Counter = field(default_factory=Counter)

    def as_json(self) -> dict[str, Any]:
        return {k: dict(v) if isinstance(v, Counter) else v for k, v in self.__dict__.items()}


@dataclass
class Batch:
    api: str                              # "openai" | "anthropic"
    id: str
    index: int                            # creation order
    created: float
    deadline: float
    requests: list[tuple[str, dict[str, Any]]]
    input_file_id: str = ""
    status: str = "in_progress"
    ended_at: float | None = None
    # custom_id → (outcome, payload): outcome "succeeded" | "errored" | "expired" | "canceled"
    results: dict[str, tuple[str, Any]] = field(default_factory=dict)
    output_file_id: str | None = None
    error_file_id: str | None = None


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    return web.json_response({"type": "error", "error": {"type": kind, "message": message},
                              "message": message}, status=status)


class FakeBatches:
    def __init__(self, provider: Any):
        self.provider = provider
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, Batch] = {}
        self.stats = BatchStats()
        self.seen: Counter = Counter()

    @property
    def options(self) -> BatchOptions:
        return self.provider.options.batch

    def reset(self) -> None:
        self.stats = BatchStats()
        self.seen.clear()

    def stats_json(self) -> dict[str, Any]:
        return self.stats.as_json()

    # -- answering ---------------------------------------------------------------------------
    def _fails(self, body: dict[str, Any]) -> bool:
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        first = self.seen[digest] == 0
        self.seen[digest] += 1
        return first and int(digest[:8], 16) / 0xFFFFFFFF < self.options.fail_rate

    def _text(self, messages: list[dict[str, Any]], body: dict[str, Any],
              schema: dict[str, Any] | None) -> tuple[str, bool]:
        from prefray.fakellm.server import _output_budget

        text = self.provider._answer(messages, body.get("seed"), schema)
        budget = _output_budget(body)
        if budget is None or answers.count_tokens(text) <= budget:
            return text, False
        self.stats.batch_truncated += 1
        return text[: max(0, budget) * 4], True

    def _count(self, model: str, tokens_in: int, tokens_out: int) -> None:
        self.stats.batch_answered += 1
        self.stats.batch_input_tokens_by_model[model] += tokens_in
        self.stats.batch_output_tokens_by_model[model] += tokens_out

    def _overflow(self, tokens_in: int) -> str | None:
        limit = self.provider.options.context_tokens
        if limit is not None and tokens_in > limit:
            return f"prompt is too long: {tokens_in} tokens > {limit} maximum (context_length_exceeded)"
        return None

    def _openai(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        from prefray.fakellm.server import _openai_schema

        messages = body.get("messages", [])
        tokens_in = sum(answers.count_tokens(answers.content_text(m.get("content"))) for m in messages)
        too_long = self._overflow(tokens_in)
        if too_long:
            return 400, {"error": {"message": too_long, "type": "invalid_request_error",
                                   "code": "context_length_exceeded"}}
        if self._fails(body):
            return 500, {"error": {"message": "injected batch request failure", "type": "server_error"}}
        text, cut = self._text(messages, body, _openai_schema(body))
        tokens_out = answers.count_tokens(text)
        self._count(str(body.get("model")), tokens_in, tokens_out)
        return 200, {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
                     "created": int(time.time()),
                     "model": f"{body.get('model')}{self.provider.options.model_version_suffix}",
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": "length" if cut else "stop"}],
                     "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                               "total_tokens": tokens_in + tokens_out}}

    def _anthropic(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        messages = body.get("messages", [])
        system = answers.content_text(body.get("system") or "")
        tokens_in = answers.count_tokens(system) + sum(
            answers.count_tokens(answers.content_text(m.get("content"))) for m in messages)
        too_long = self._overflow(tokens_in)
        if too_long:
            return "errored", {"type": "error", "error": {"type": "invalid_request_error", "message": too_long}}
        if self._fails(body):
            return "errored", {"type": "error", "error": {"type": "api_error",
                                                          "message": "injected batch request failure"}}
        schema = ((body.get("output_config") or {}).get("format") or {}).get("schema")
        text, cut = self._text(messages, body, schema)
        tokens_out = answers.count_tokens(text)
        self._count(str(body.get("model")), tokens_in, tokens_out)
        return "succeeded", {"id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant",
                             "model": f"{body.get('model')}{self.provider.options.model_version_suffix}",
                             "content": [{"type": "text", "text": text}], "stop_sequence": None,
                             "stop_reason": "max_tokens" if cut else "end_turn",
                             "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out}}

    def _advance(self, batch: Batch) -> None:
        """End the batch if its time has come: answer (or expire) every request."""
        if batch.ended_at is not None or time.time() < batch.deadline:
            return
        batch.ended_at = time.time()
        if batch.index < self.options.expire_first:
            batch.status = "expired"
            self.stats.batch_expired += len(batch.requests)
            batch.results = {cid: ("expired", None) for cid, _ in batch.requests}
        else:
            batch.status = "completed"
            for cid, body in batch.requests:
                if batch.api == "openai":
                    code, payload = self._openai(body)
                    outcome = "succeeded" if code == 200 else "errored"
                    batch.results[cid] = (outcome, {"status_code": code, "body": payload})
                else:
                    batch.results[cid] = self._anthropic(body)
                self.stats.batch_failed += batch.results[cid][0] == "errored"
        if batch.api == "openai":
            self._openai_files(batch)

    def _create(self, api: str, requests: list[tuple[str, dict[str, Any]]], prefix: str) -> Batch:
        now = time.time()
        batch = Batch(api, f"{prefix}{uuid.uuid4().hex[:16]}", self.stats.batches_created, now,
                      now + self.options.delay_s, requests)
        self.batches[batch.id] = batch
        self.stats.batches_created += 1
        self.stats.batches_by_api[api] += 1
        self.stats.batch_requests += len(requests)
        for _, body in requests:
            digest = "seen:" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
            self.stats.batch_repeated_requests += self.seen[digest] > 0
            self.seen[digest] += 1
        return batch

    # -- OpenAI: files and batches -----------------------------------------------------------
    def _file(self, content: str, purpose: str, filename: str) -> dict[str, Any]:
        meta = {"id": f"file-{uuid.uuid4().hex[:16]}", "object": "file", "bytes": len(content.encode()),
                "created_at": int(time.time()), "filename": filename, "purpose": purpose, "status": "processed"}
        self.files[meta["id"]] = {**meta, "content": content}
        return meta

    def _openai_files(self, batch: Batch) -> None:
        good, bad = [], []
        for cid, (outcome, payload) in batch.results.items():
            line = {"id": f"batch_req_{uuid.uuid4().hex[:12]}", "custom_id": cid, "response": None, "error": None}
            if outcome == "expired":
                line["error"] = {"code": "batch_expired", "message": "the batch expired before this request ran"}
            else:
                line["response"] = {**payload, "request_id": f"req_{uuid.uuid4().hex[:12]}"}
            (good if outcome == "succeeded" else bad).append(json.dumps(line))
        if good:
            batch.output_file_id = self._file("\n".join(good) + "\n", "batch_output", "output.jsonl")["id"]
        if bad:
            batch.error_file_id = self._file("\n".join(bad) + "\n", "batch_output", "errors.jsonl")["id"]

    async def upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload, purpose = form.get("file"), str(form.get("purpose") or "")
        if upload is None or not hasattr(upload, "file"):
            return _error(400, "missing file")
        self.stats.files_uploaded += 1
        content = upload.file.read().decode()
        return web.json_response(self._file(content, purpose, upload.filename or "upload.jsonl"))

    async def file_meta(self, request: web.Request) -> web.Response:
        found = self.files.get(request.match_info["file_id"])
        if found is None:
            return _error(404, "no such file", "not_found_error")
        return web.json_response({k: v for k, v in found.items() if k != "content"})

    async def file_content(self, request: web.Request) -> web.Response:
        found = self.files.get(request.match_info["file_id"])
        if found is None:
            return _error(404, "no such file", "not_found_error")
        self.stats.batch_results_read += found["purpose"] == "batch_output"
        return web.Response(body=found["content"].encode(), content_type="application/octet-stream")

    def _openai_json(self, batch: Batch) -> dict[str, Any]:
        outcomes = Counter(outcome for outcome, _ in batch.results.values())
        ended = batch.ended_at is not None
        return {"id": batch.id, "object": "batch", "endpoint": "/v1/chat/completions", "errors": None,
                "input_file_id": batch.input_file_id, "completion_window": "24h", "status": batch.status,
                "output_file_id": batch.output_file_id, "error_file_id": batch.error_file_id,
                "created_at": int(batch.created), "in_progress_at": int(batch.created),
                "expires_at": int(batch.created + WINDOW_S),
                "completed_at": int(batch.ended_at) if ended and batch.status == "completed" else None,
                "expired_at": int(batch.ended_at) if ended and batch.status == "expired" else None,
                "request_counts": {"total": len(batch.requests), "completed": outcomes["succeeded"],
                                   "failed": len(batch.results) - outcomes["succeeded"]},
                "metadata": None}

    async def openai_create(self, request: web.Request) -> web.Response:
        body = await request.json()
        found = self.files.get(str(body.get("input_file_id")))
        if found is None:
            return _error(404, f"no file {body.get('input_file_id')}", "not_found_error")
        if found["purpose"] != "batch" or body.get("endpoint") != "/v1/chat/completions" \
                or body.get("completion_window") != "24h":
            return _error(400, "batch needs a purpose=batch file, endpoint /v1/chat/completions, window 24h")
        requests, ids = [], set()
        for number, text in enumerate(found["content"].splitlines(), 1):
            if not text.strip():
                continue
            line = json.loads(text)
            cid = line.get("custom_id")
            if not cid or cid in ids or line.get("method") != "POST" or line.get("url") != body["endpoint"]:
                return _error(400, f"line {number}: custom_id missing or repeated, "
                                   f"or method/url not POST {body['endpoint']}")
            ids.add(cid)
            requests.append((cid, line.get("body") or {}))
        batch = self._create("openai", requests, "batch_")
        batch.input_file_id = found["id"]
        return web.json_response(self._openai_json(batch))

    def _batch(self, request: web.Request, api: str) -> Batch | None:
        batch = self.batches.get(request.match_info["batch_id"])
        if batch is None or batch.api != api:
            return None
        self._advance(batch)
        return batch

    async def openai_retrieve(self, request: web.Request) -> web.Response:
        batch = self._batch(request, "openai")
        if batch is None:
            return _error(404, "no such batch", "not_found_error")
        return web.json_response(self._openai_json(batch))

    async def openai_cancel(self, request: web.Request) -> web.Response:
        batch = self._batch(request, "openai")
        if batch is None:
            return _error(404, "no such batch", "not_found_error")
        if batch.ended_at is None:
            batch.ended_at, batch.status = time.time(), "cancelled"
            batch.results = {cid: ("canceled", None) for cid, _ in batch.requests}
        return web.json_response(self._openai_json(batch))

    # -- Anthropic: message batches ----------------------------------------------------------
    def _anthropic_json(self, batch: Batch, request: web.Request) -> dict[str, Any]:
        ended = batch.ended_at is not None
        outcomes = Counter(outcome for outcome, _ in batch.results.values())
        return {"id": batch.id, "type": "message_batch", "processing_status": "ended" if ended else "in_progress",
                "request_counts": {"processing": 0 if ended else len(batch.requests),
                                   "succeeded": outcomes["succeeded"], "errored": outcomes["errored"],
                                   "canceled": outcomes["canceled"], "expired": outcomes["expired"]},
                "created_at": _iso(batch.created), "expires_at": _iso(batch.created + WINDOW_S),
                "ended_at": _iso(batch.ended_at), "archived_at": None, "cancel_initiated_at": None,
                "results_url": (f"{request.scheme}://{request.host}/v1/messages/batches/{batch.id}/results"
                                if ended else None)}

    async def anthropic_create(self, request: web.Request) -> web.Response:
        body = await request.json()
        items = body.get("requests") or []
        ids = [item.get("custom_id") for item in items]
        if not items or len(set(ids)) != len(ids) or not all(isinstance(i, str) and CUSTOM_ID.match(i) for i in ids):
            return _error(400, "requests: custom_id must be unique and match ^[a-zA-Z0-9_-]{1,64}$")
        batch = self._create("anthropic", [(item["custom_id"], item.get("params") or {}) for item in items],
                             "msgbatch_")
        return web.json_response(self._anthropic_json(batch, request))

    async def anthropic_retrieve(self, request: web.Request) -> web.Response:
        batch = self._batch(request, "anthropic")
        if batch is None:
            return _error(404, "no such batch", "not_found_error")
        return web.json_response(self._anthropic_json(batch, request))

    async def anthropic_results(self, request: web.Request) -> web.Response:
        batch = self._batch(request, "anthropic")
        if batch is None or batch.ended_at is None:
            return _error(404 if batch is None else 400, "no results yet" if batch else "no such batch")
        self.stats.batch_results_read += 1
        lines = []
        for cid, (outcome, payload) in batch.results.items():
            result: dict[str, Any] = {"type": outcome}
            if outcome == "succeeded":
                result["message"] = payload
            elif outcome == "errored":
                result["error"] = payload
            lines.append(json.dumps({"custom_id": cid, "result": result}))
        return web.Response(body=("\n".join(lines) + "\n").encode(), content_type="application/binary")

    async def anthropic_cancel(self, request: web.Request) -> web.Response:
        batch = self._batch(request, "anthropic")
        if batch is None:
            return _error(404, "no such batch", "not_found_error")
        if batch.ended_at is None:
            batch.ended_at, batch.status = time.time(), "canceled"
            batch.results = {cid: ("canceled", None) for cid, _ in batch.requests}
        return web.json_response(self._anthropic_json(batch, request))

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/files", self.upload),
            web.get("/v1/files/{file_id}", self.file_meta),
            web.get("/v1/files/{file_id}/content", self.file_content),
            web.post("/v1/batches", self.openai_create),
            web.get("/v1/batches/{batch_id}", self.openai_retrieve),
            web.post("/v1/batches/{batch_id}/cancel", self.openai_cancel),
            web.post("/v1/messages/batches", self.anthropic_create),
            web.get("/v1/messages/batches/{batch_id}", self.anthropic_retrieve),
            web.get("/v1/messages/batches/{batch_id}/results", self.anthropic_results),
            web.post("/v1/messages/batches/{batch_id}/cancel", self.anthropic_cancel),
        ]
