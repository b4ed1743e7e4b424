"""Every answered call survives a crash: gateways journal answers the moment they arrive.

A gateway appends each answered call (the whole CallResult) to RUN_DIR/journal/<gateway>-<pid>-<token>.jsonl
and flushes it, before the driver has written the unit's row into a shard. If the driver dies
(kill -9, power cut on the driver's side), the next launch into the run dir loads the journal,
drops the answers already in shards (matched by request hash and text) and hands the rest to the
units that ask for the same request again, instead of sending them: only calls that were in
flight when the run died are sent again. A finished run folds its journal away (the shards hold
every answer); a line cut short by a kill is skipped.

Each answer also carries the token of the batch (one actor call) it answered, and a gateway marks a
batch done when it returns it. When a gateway process dies, Ray restarts it and sends it the batches
it was answering again; the new process first takes, from its predecessors' journals, the answers
of those unfinished batches (`unfinished_batches`) and sends only the rest: a gateway's death re-sends
only the calls that were in flight.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections import Counter, defaultdict, deque

from prefray.engine.rundir.appendlog import AppendLog
from prefray.engine.rundir.layout import RunDir
from prefray.engine.rundir.shards import drop_absorbed, read_rows
from prefray.engine.types import CallResult, ChatRequest, ModelSpec

_FIELDS = {f.name for f in dataclasses.fields(CallResult)}


class AnswerJournal(AppendLog):
    """The answer journal of one gateway process."""

    def __init__(self, run_dir: RunDir, name: str):
        super().__init__(run_dir.journal, name)

    def record(self, model_id: str, request: ChatRequest, result: CallResult, batch: str = "") -> None:
        """`request_hash` links to stored rows (no seed); `content_hash` tells samples apart;
        `batch` is the token of the actor call it answers."""
        self.write({"model_id": model_id, "request_hash": request.prompt_hash(model_id),
                    "content_hash": request.content_hash(model_id), "result": dataclasses.asdict(result),
                    **({"batch": batch} if batch else {})})

    def batch_done(self, batch: str) -> None:
        """The batch's answers were returned to the driver: a restart never needs them."""
        self.write({"batch_done": batch})


class ReplayPool:
    """Answers journaled by an earlier launch that never reached a shard, by (model id, request)."""

    def __init__(self, answers: dict[tuple[str, str], deque[CallResult]]):
        self.answers = answers

    def __len__(self) -> int:
        return sum(len(q) for q in self.answers.values())

    def take(self, spec: ModelSpec, request: ChatRequest) -> CallResult | None:
        queue = self.answers.get((spec.model_id, request.content_hash(spec.model_id)))
        return queue.popleft() if queue else None


def _lines(run_dir: RunDir, writer: str | None = None):
    """Every whole line of the run's journals (of the journals `writer` named, if given)."""
    folder = run_dir.journal
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        if writer is not None and not _written_by(path.name, writer):
            continue
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue


def _written_by(file_name: str, writer: str) -> bool:
    """AppendLog names its files `<name>-<pid>-<token>.jsonl`."""
    return (file_name.startswith(writer + "-")
            and re.fullmatch(r"\d+-[0-9a-f]+\.jsonl", file_name[len(writer) + 1:]) is not None)


def unfinished_batches(run_dir: RunDir, writer: str) -> dict[str, dict[str, deque[CallResult]]]:
    """The answers journaled by earlier processes named `writer` (a gateway actor's earlier
    lives) for batches they never returned: by batch token, then by content hash."""
    done: set[str] = set()
    answers: dict[str, dict[str, deque[CallResult]]] = defaultdict(lambda: defaultdict(deque))
    for entry in _lines(run_dir, writer):
        if "batch_done" in entry:
            done.add(entry["batch_done"])
        elif entry.get("batch"):
            result = CallResult(**{k: v for k, v in entry["result"].items() if k in _FIELDS})
            answers[entry["batch"]][entry["content_hash"]].append(result)
    return {batch: dict(found) for batch, found in answers.items() if batch not in done}


def load_replay(run_dir: RunDir) -> ReplayPool:
    """The journaled answers of `run_dir` minus those already stored in its shards."""
    entries = sorted((e for e in _lines(run_dir) if "result" in e), key=lambda e: e["result"].get("finished_at", 0.0))
    if not entries:
        return ReplayPool({})
    rows = read_rows(run_dir, columns=["model_id", "request_hash", "text"]).to_pylist()
    stored = Counter((r["model_id"], r["request_hash"], r["text"]) for r in rows)
    answers: dict[tuple[str, str], deque[CallResult]] = defaultdict(deque)
    for entry in entries:
        result = CallResult(**{k: v for k, v in entry["result"].items() if k in _FIELDS})
        key = (entry["model_id"], entry["request_hash"], result.text)
        if stored[key] > 0:
            stored[key] -= 1
            continue
        answers[(entry["model_id"], entry["content_hash"])].append(result)
    return ReplayPool(dict(answers))


def fold_away(run: RunDir) -> None:
    """After a run that ended normally every answer is in a shard: drop the journal."""
    shutil.rmtree(run.journal, ignore_errors=True)


def clean_leftovers(run: RunDir) -> int:
    """Remove temp files a killed run left behind and the shards a large file absorbed before the
    kill (only the run dir's owner calls this)."""
    removed = drop_absorbed(run) if run.shards.is_dir() else 0
    for path in run.leftover_temp_files():
        path.unlink(missing_ok=True)
        removed += 1
    return removed
