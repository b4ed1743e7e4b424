"""Prompt caching: cached tokens priced and recorded, the fake's caching semantics, cache-first requests."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prefray.engine.calls.batch.tier import tier_cost
from prefray.engine.calls.pricing import cache_saving, cacheable_tokens, call_cost, expected_cache, max_call_cost
from prefray.engine.calls.providers.caching import anthropic_breakpoint, prefix_text, prompt_cache_key
from prefray.engine.results.aggregate import ledger
from prefray.engine.rundir import RunDir
from prefray.engine.rundir.paid import PAID_SCHEMA, PaidLog, read_paid
from prefray.engine.types import ChatRequest, ModelSpec, cache_through
from prefray.fakellm import answers
from prefray.fakellm.prompt_cache import PromptCache

OPENAI = ModelSpec(name="o", provider="openai", model_id="gpt", price_input_per_mtok=2.0,
                   price_output_per_mtok=8.0, price_cache_read_per_mtok=0.5, batch_discount=0.5)
CLAUDE = ModelSpec(name="c", provider="anthropic", model_id="claude", price_input_per_mtok=3.0,
                   price_output_per_mtok=15.0, price_cache_read_per_mtok=0.3, price_cache_write_per_mtok=3.75,
                   batch_discount=0.5)
MEMORY = "".join(f"- I remember fact number {i} about the user.\n" for i in range(150))   # ~6,600 characters


# -- prices ------------------------------------------------------------------------------------
def test_cached_tokens_are_priced_apart_from_the_other_input():
    # 10,000 input tokens of which 6,000 read and 1,000 written; 500 output
    assert call_cost(CLAUDE, 10_000, 500, 6_000, 1_000) == pytest.approx(
        (3_000 * 3.0 + 6_000 * 0.3 + 1_000 * 3.75 + 500 * 15.0) / 1e6)
    assert call_cost(OPENAI, 10_000, 0, 8_192) == pytest.approx((1_808 * 2.0 + 8_192 * 0.5) / 1e6)
    assert call_cost(OPENAI, 10_000, 500) == pytest.approx((10_000 * 2.0 + 500 * 8.0) / 1e6)   # unchanged
    no_price = ModelSpec(name="x", provider="openai", model_id="x", price_input_per_mtok=2.0)
    assert call_cost(no_price, 10_000, 0, 8_000) == call_cost(no_price, 10_000, 0)   # null: the input price
    assert cache_saving(CLAUDE, 6_000, 1_000) == pytest.approx((6_000 * 2.7 - 1_000 * 0.75) / 1e6)


def test_the_batch_discount_applies_to_the_cached_prices_too():
    assert tier_cost(CLAUDE, 10_000, 500, "batch", 6_000, 1_000) == pytest.approx(
        0.5 * call_cost(CLAUDE, 10_000, 500, 6_000, 1_000))


def test_a_marked_prefix_reserves_the_write_price_where_writes_cost_more():
    plain = ChatRequest(({"role": "user", "content": MEMORY},), params={"max_tokens": 10})
    marked = ChatRequest(({"role": "user", "content": MEMORY},), params={"max_tokens": 10}, cache_prefix=len(MEMORY))
    assert max_call_cost(CLAUDE, marked) > max_call_cost(CLAUDE, plain)
    assert max_call_cost(OPENAI, marked) == max_call_cost(OPENAI, plain)   # OpenAI bills no write


def test_expected_cache_for_the_plan():
    assert cacheable_tokens(OPENAI, 1_000) == 0
    assert cacheable_tokens(OPENAI, 1_300) == 1_280              # steps of 128 past 1,024
    assert cacheable_tokens(CLAUDE, 1_300) == 1_300              # up to the breakpoint
    # 117 calls of one BenchPreS profile: 2,000-token memory, 2,100 tokens each
    got = expected_cache(OPENAI, 117, 2_000, 2_100)
    assert got.hit_rate == pytest.approx(116 * 1_920 / (117 * 2_100))
    assert got.cost_usd == pytest.approx(call_cost(OPENAI, 117 * 2_100, 0, 116 * 1_920))
    assert got.saved_usd == pytest.approx(116 * 1_920 * 1.5 / 1e6)
    claude = expected_cache(CLAUDE, 3, 2_000, 2_100)
    assert claude.cost_usd == pytest.approx(call_cost(CLAUDE, 6_300, 0, 4_000, 2_000))
    assert expected_cache(OPENAI, 1, 2_000, 2_100).hit_rate == 0.0


# -- requests built cache-first ----------------------------------------------------------------
def test_the_anthropic_breakpoint_splits_the_text_without_changing_it():
    tail = "Recipient: the bank.\nTask: ask for a loan."
    messages = ({"role": "user", "content": MEMORY + tail},)
    request = ChatRequest(messages, system="Be brief.", cache_prefix=cache_through("Be brief.", messages, MEMORY))
    assert request.cache_prefix == len("Be brief.") + len(MEMORY)
    assert prefix_text(request) == "Be brief." + MEMORY
    system, messages = anthropic_breakpoint(CLAUDE, request)
    assert system == "Be brief."
    blocks = messages[0]["content"]
    assert blocks[0]["cache_control"] == {"type": "ephemeral"} and blocks[0]["text"] == MEMORY
    assert answers.content_text(blocks) == MEMORY + tail     # the same text, so the same answer
    assert request.messages[0]["content"] == MEMORY + tail     # the request itself is left as it was
    short = ChatRequest(({"role": "user", "content": "short" + tail},), cache_prefix=5)
    assert anthropic_breakpoint(CLAUDE, short)[1][0]["content"] == "short" + tail   # below the minimum: no mark
    in_system = ChatRequest(({"role": "user", "content": tail},), system=MEMORY, cache_prefix=len(MEMORY))
    system, _ = anthropic_breakpoint(CLAUDE, in_system)
    assert system == [{"type": "text", "text": MEMORY, "cache_control": {"type": "ephemeral"}}]


def test_the_prompt_cache_key_comes_from_the_prefix_and_leaves_the_hashes_alone():
    def request(tail: str) -> ChatRequest:
        return ChatRequest(({"role": "user", "content": MEMORY + tail},), cache_prefix=len(MEMORY))

    a, b = request("one"), request("two")
    assert prompt_cache_key(OPENAI, a) == prompt_cache_key(OPENAI, b) is not None
    assert MEMORY[:20] not in prompt_cache_key(OPENAI, a)
    assert prompt_cache_key(OPENAI, ChatRequest(({"role": "user", "content": MEMORY},))) is None
    other = ModelSpec(name="g", provider="openai", model_id="g", base_url="https://example.org/v1")
    assert prompt_cache_key(other, a) is None          # an endpoint not known to take the parameter
    unmarked = ChatRequest(({"role": "user", "content": MEMORY + "one"},))
    assert a.prompt_hash("m") == unmarked.prompt_hash("m") and a.content_hash("m") == unmarked.content_hash("m")


# -- the fake's semantics ------------------------------------------------------------------------
def ask(cache: PromptCache, route: str, *args):
    """One request to the fake's cache: looked up on arrival, kept once answered."""
    use = getattr(cache, route)(*args)
    cache.answered(use)
    return use


def test_fake_openai_caches_prefixes_of_1024_tokens_and_more_in_steps_of_128():
    cache = PromptCache(lifetime_s=300, min_tokens=1024)
    tail = "x" * 400
    messages = [{"role": "user", "content": MEMORY + tail}]
    tokens = answers.count_tokens(MEMORY + tail)
    assert ask(cache, "openai", "m", messages, tokens).read == 0          # first sight: nothing read
    second = ask(cache, "openai", "m", [{"role": "user", "content": MEMORY + "y" * 400}], tokens).read
    shared = answers.count_tokens("user:" + MEMORY)
    assert second >= 1024 and (second - 1024) % 128 == 0 and shared - 128 < second <= shared
    assert ask(cache, "openai", "other", messages, tokens).read == 0       # per model
    short = [{"role": "user", "content": "z" * 2000}]
    assert ask(cache, "openai", "m", short, 500).read == 0 and ask(cache, "openai", "m", short, 500).read == 0
    # requests arriving together, before the first is answered, all miss
    fresh = [{"role": "user", "content": "w" * 8000}]
    first, second = cache.openai("m", fresh, 2000), cache.openai("m", fresh, 2000)
    assert first.read == second.read == 0
    cache.answered(first)
    assert cache.openai("m", fresh, 2000).read > 0


def test_fake_anthropic_reads_and_writes_at_breakpoints_and_forgets_after_the_lifetime(monkeypatch):
    import prefray.fakellm.prompt_cache as module

    now = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    cache = PromptCache(lifetime_s=300, min_tokens=1024)
    marked = [{"role": "user", "content": [{"type": "text", "text": MEMORY, "cache_control": {"type": "ephemeral"}},
                                           {"type": "text", "text": "Task one."}]}]
    first = ask(cache, "anthropic", "c", None, marked)
    assert first.read == 0 and first.written > 1024
    second = ask(cache, "anthropic", "c", None, marked)
    assert (second.read, second.written) == (first.written, 0)
    now[0] += 299                                               # each read refreshes the lifetime
    assert ask(cache, "anthropic", "c", None, marked).read == first.written
    now[0] += 301
    assert ask(cache, "anthropic", "c", None, marked).read == 0         # expired: written again
    unmarked = [{"role": "user", "content": MEMORY + "Task one."}]
    plain = ask(cache, "anthropic", "c", None, unmarked)
    assert plain.read == plain.written == 0
    short = [{"role": "user", "content": [{"type": "text", "text": "tiny", "cache_control": {"type": "ephemeral"}}]}]
    assert ask(cache, "anthropic", "c", None, short).written == 0       # below the minimum cacheable length


# -- replies read and the ledger -----------------------------------------------------------------
def test_provider_replies_keep_cached_tokens_apart():
    from prefray.engine.calls.providers.anthropic_messages import read_reply as anthropic_reply
    from prefray.engine.calls.providers.openai_chat import read_reply as openai_reply

    completion = {
        "id": "c", "object": "chat.completion", "created": 0, "model": "gpt",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5000, "completion_tokens": 7, "total_tokens": 5007,
                  "prompt_tokens_details": {"cached_tokens": 4096}}}
    reply = openai_reply(completion, {})
    assert (reply.input_tokens, reply.cache_read_tokens, reply.cache_write_tokens) == (5000, 4096, 0)
    message = {
        "id": "m", "type": "message", "role": "assistant", "model": "claude", "stop_reason": "end_turn",
        "content": [{"type": "text", "text": "hi"}],
        "usage": {"input_tokens": 50, "output_tokens": 7, "cache_read_input_tokens": 3000,
                  "cache_creation_input_tokens": 200}}
    reply = anthropic_reply(message, {})
    assert (reply.input_tokens, reply.cache_read_tokens, reply.cache_write_tokens) == (3250, 3000, 200)


def test_the_ledger_records_cached_tokens_and_reads_ledgers_written_before_them(tmp_path):
    run = tmp_path / "run"
    (run / "ledger").mkdir(parents=True)
    old = pa.table({name: pa.array([None], PAID_SCHEMA.field(name).type) for name in PAID_SCHEMA.names[:8]})
    old = old.set_column(0, "provider", pa.array(["openai"])).set_column(1, "model_id", pa.array(["gpt"]))
    old = old.set_column(3, "outcome", pa.array(["ok"])).set_column(4, "input_tokens", pa.array([100]))
    pq.write_table(old.set_column(6, "cost_usd", pa.array([0.5])), run / "ledger" / "paid-old.parquet")
    log = PaidLog(RunDir(run), "gateway-x")
    log.record("openai", "gpt", "h", "sent", 0, 0, 0.0)
    log.record("openai", "gpt", "h", "ok", 5000, 10, call_cost(OPENAI, 5000, 10, 4096), 4096, 0,
               cache_saving(OPENAI, 4096, 0))
    log.close()
    paid = read_paid(RunDir(run))
    assert sorted(paid["cache_read_tokens"].to_pylist(), key=str) == [0, 4096, None]
    rows = pa.table({"request_hash": ["h"], "model_id": ["gpt"], "provider": ["openai"], "stage": ["generate"],
                     "cached": [False], "status": ["ok"], "input_tokens": [5000], "output_tokens": [10],
                     "cost_usd": [0.0]})
    costs = ledger(rows, paid).to_pylist()
    assert sum(r["cache_read_tokens"] for r in costs) == 4096
    assert sum(r["cost_usd"] for r in costs) == pytest.approx(0.5 + call_cost(OPENAI, 5000, 10, 4096))
    stage = next(r for r in costs if r["stage"] == "generate")
    assert stage["cache_hit_rate"] == pytest.approx(4096 / 5000)
    assert stage["cache_saved_usd"] == pytest.approx(4096 * 1.5 / 1e6)
    line = json.loads(log.path.read_text().splitlines()[-1])
    assert (line["cache_read_tokens"], line["cache_write_tokens"]) == (4096, 0)


# -- n samples per request -----------------------------------------------------------------------
def test_a_units_samples_are_grouped_by_prompt_and_consecutive_seeds():
    from prefray.engine.calls.samples import sample_groups

    spec = ModelSpec(name="o", provider="openai", model_id="gpt", samples_per_request=3)

    def ask(prompt: str, seed: int | None) -> ChatRequest:
        return ChatRequest(({"role": "user", "content": prompt},), seed=seed)

    requests = [ask("a", 0), ask("b", 0), ask("a", 1), ask("a", 2), ask("a", 3), ask("b", 1), ask("c", None),
                ask("b", 5)]
    assert sample_groups(spec, requests) == [[0, 2, 3], [1, 5], [4], [6], [7]]
    one = ModelSpec(name="o", provider="openai", model_id="gpt")
    assert sample_groups(one, requests) == [[i] for i in range(8)]


def test_n_choices_split_into_samples_with_the_input_billed_once():
    from prefray.engine.calls.samples import split_choices, split_output
    from prefray.engine.types import CallResult

    assert split_output(10, ["aaaa", "aaaa", "aa"]) == [4, 4, 2] and sum(split_output(7, ["a", "bb", "ccc"])) == 7
    result = CallResult(status="ok", text="first", finish_reason="stop", input_tokens=5000, output_tokens=9,
                        cache_read_tokens=4096, more=[("second", "length"), ("third", "stop")], tries=1,
                        cost_usd=call_cost(OPENAI, 5000, 9, 4096), cache_saved_usd=cache_saving(OPENAI, 4096, 0))
    samples = split_choices(OPENAI, result, 3)
    assert [s.text for s in samples] == ["first", "second", "third"]
    assert [s.input_tokens for s in samples] == [5000, 0, 0] and sum(s.output_tokens for s in samples) == 9
    assert samples[1].truncated and not samples[0].truncated
    assert sum(s.cost_usd for s in samples) == pytest.approx(result.cost_usd)
    assert all(not s.more for s in samples)
    short = split_choices(OPENAI, result, 4)
    assert short[3].status == "failed" and short[3].cause == "bad_response"
    failed = split_choices(OPENAI, CallResult(status="failed", cause="rate_limit", tries=4), 3)
    assert [(s.status, s.cause) for s in failed] == [("failed", "rate_limit")] * 3


def test_samples_per_request_is_refused_for_anthropic():
    with pytest.raises(ValueError, match="samples_per_request=20 needs a provider that takes n"):
        ModelSpec.from_config({"name": "c", "provider": "anthropic", "model_id": "c", "samples_per_request": 20})
    asking = ChatRequest(({"role": "user", "content": "x"},), params={"max_tokens": 10}, n=20)
    estimated_input = int(asking.estimated_input_tokens() * 1.25) + 1
    assert max_call_cost(OPENAI, asking) == pytest.approx(call_cost(OPENAI, estimated_input, 20 * 10))   # input once


def test_samples_per_request_on_anthropic_is_refused_before_anything_runs(tmp_path):
    from tests.conftest import refused_here

    done = refused_here("model=fake-anthropic", "judge=fake", "benchmark=prisk_narrowing", "limit=1",
                        "model.samples_per_request=20", f"run.dir={tmp_path / 'run'}")
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "samples_per_request=20 needs a provider that takes n" in lines[0], done.stderr
    assert not (tmp_path / "run").exists()


def test_a_cold_prefix_is_sent_once_before_the_requests_that_share_it():
    import asyncio

    from prefray.engine.calls.cache_order import WarmPrefixes, prefix_first

    spec = ModelSpec(name="c", provider="anthropic", model_id="c")
    warm = WarmPrefixes(spec)
    shared = [ChatRequest(({"role": "user", "content": MEMORY + f"task {i}"},), cache_prefix=len(MEMORY))
              for i in range(4)]
    alone = ChatRequest(({"role": "user", "content": "no prefix"},))
    requests = [shared[0], alone, *shared[1:]]
    started: list[str] = []

    async def run() -> list[str]:
        release = asyncio.Event()

        async def call(request: ChatRequest) -> str:
            name = request.messages[0]["content"][-6:]
            started.append(name)
            if name == "task 0":
                await release.wait()      # the leader answers only once released
            return name

        job = asyncio.ensure_future(prefix_first(requests, [warm.key(r) for r in requests], warm, call))
        for _ in range(5):
            await asyncio.sleep(0)
        assert started == ["task 0", "prefix"]     # the followers wait for the leader; the rest goes
        release.set()
        return await job

    assert asyncio.run(run()) == ["task 0", "prefix", "task 1", "task 2", "task 3"]
    assert sorted(started[2:]) == ["task 1", "task 2", "task 3"]
    started.clear()
    asyncio.run(prefix_first(shared, [warm.key(r) for r in shared], warm, lambda r: asyncio.sleep(0, "x")))
    assert not warm.cold(warm.key(shared[0]))       # warm now: the next batch goes out at once


def test_calls_csv_and_the_viewer_show_each_cells_hit_rate_and_saving(tmp_path):
    import pyarrow.csv as pacsv

    from prefray.engine.results.aggregate import summarize_calls
    from prefray.view.data import RunData
    from prefray.view.pages import overview_html

    def row(stage: str, tokens: int, read: int, saved: float) -> dict:
        return {"benchmark": "benchpres", "model": "gpt-4o", "condition": "default", "stage": stage, "judge": "",
                "status": "ok", "input_tokens": tokens, "output_tokens": 10, "cost_usd": 0.01,
                "cache_read_tokens": read, "cache_write_tokens": 0, "cache_saved_usd": saved}

    calls = summarize_calls(pa.Table.from_pylist([row("generate", 1000, 900, 0.002), row("generate", 1000, 700, 0.001),
                                                  row("judge", 500, 0, 0.0)]))
    generate = next(r for r in calls.to_pylist() if r["stage"] == "generate")
    assert generate["cache_hit_rate"] == pytest.approx(0.8) and generate["cache_saved_usd"] == pytest.approx(0.003)
    pacsv.write_csv(calls, tmp_path / "calls.csv")
    page = overview_html(RunData(RunDir(tmp_path)))
    assert "Spending and the prompt cache" in page
    assert "64.0%" in page and "0.0030" in page and "0.0300" in page     # 1600 of 2500 input tokens read


def test_benchpres_sends_a_profiles_calls_together_and_declares_its_shared_memory():
    from types import SimpleNamespace

    from prefray.benchmarks.benchpres.benchmark import by_profile, profile_prefixes

    def inst(name: str, task: str) -> SimpleNamespace:
        return SimpleNamespace(name=name, prompt=f"<memory>\n{name}'s memory\n</memory>\nTask: {task}")

    instances = [inst("Ann", "a"), inst("Bo", "b"), inst("Ann", "c"), inst("Bo", "d"), inst("Cy", "e")]
    assert [(i.name, i.prompt[-1]) for i in by_profile(instances)] == [("Ann", "a"), ("Ann", "c"), ("Bo", "b"),
                                                                       ("Bo", "d"), ("Cy", "e")]
    prefixes = profile_prefixes(instances)
    assert prefixes["Ann"] == len("<memory>\nAnn's memory\n</memory>\nTask: ")
    assert prefixes["Cy"] == len(instances[4].prompt)      # one context: its samples share the whole prompt


def test_the_plan_can_price_a_stages_requests_at_the_cached_prices():
    from prefray.engine.calls.cache_order import expected_for

    marked = [ChatRequest(({"role": "user", "content": MEMORY + f"task {i}"},), cache_prefix=len(MEMORY))
              for i in range(10)]
    plain = [ChatRequest(({"role": "user", "content": "short"},))]
    got = expected_for(OPENAI, marked + plain)
    each = marked[0].estimated_input_tokens()
    group = expected_cache(OPENAI, 10, len(MEMORY) // 4, each)
    assert got.cost_usd == pytest.approx(group.cost_usd + call_cost(OPENAI, plain[0].estimated_input_tokens(), 0))
    assert got.hit_rate == pytest.approx(group.hit_rate * 10 * each / (10 * each + plain[0].estimated_input_tokens()))
    assert 0.8 < got.hit_rate < 1 and got.saved_usd > 0
