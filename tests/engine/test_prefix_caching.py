"""Prefix caching on the real model: reused KV changes no greedy token, hits are where they should be
(inside a block, at a boundary, the whole prompt; never across adapters or salts), n > 1 choices
compute their prompt once, and preemption and eviction under a tiny KV budget keep outputs exact."""

import pytest

from llmop.engine.engine import LLMEngine
from llmop.engine.sampling_params import SamplingParams

BS = 16
BLOCK_BYTES_FP32 = 2 * 30 * 3 * 64 * 4 * BS  # SmolLM2: (K,V) x layers x KV heads x head dim x fp32, 16 tokens
TEXT = ("The history of the printing press begins in the fifteenth century, when movable type changed how "
        "books were made, sold and read across Europe. Workshops multiplied in trading cities; scholars, "
        "merchants and clergy argued over what should be printed, and by whom. ") * 3


def engine(**kw) -> LLMEngine:
    cfg = dict(dtype="float32", kv_cache_memory_bytes=256 << 20, max_num_seqs=16, max_num_batched_tokens=512)
    return LLMEngine(**{**cfg, **kw})


@pytest.fixture(scope="module")
def cached():
    return engine()


@pytest.fixture(scope="module")
def uncached():
    return engine(enable_prefix_caching=False)


@pytest.fixture(scope="module")
def base(cached):
    ids = cached.tokenizer.encode(TEXT)
    assert len(ids) > 140
    return ids


def greedy(n=24):
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


_ids = iter(range(1_000_000))


def run(eng: LLMEngine, prompts, params=None, shapes: list | None = None, **add) -> list[tuple[list[int], int]]:
    """Submit all prompts at once and step until done: (tokens, cached prompt tokens) per prompt.
    `shapes` gets each model call's (query lengths, sequence lengths)."""
    rids = []
    for p in prompts:
        rids.append(f"t{next(_ids)}")
        eng.add_request(rids[-1], p, params or greedy(), **add)
    toks: dict[str, list[int]] = {r: [] for r in rids}
    cached: dict[str, int] = {}
    while eng.has_unfinished():
        for out in eng.step():
            toks[out.request_id].extend(out.new_token_ids)
            cached[out.request_id] = out.num_cached_tokens
        if shapes is not None and eng.last_step_ran:
            shapes.append((eng.last_batch.query_lens, eng.last_batch.seq_lens))
    return [(toks[r], cached[r]) for r in rids]


def one_at_a_time(eng, prompts, **add):
    return [run(eng, [p], **add)[0] for p in prompts]


def variants(base):
    """Prompts sharing base[:k] for k inside a block, at a boundary, the whole prompt, and beyond it,
    with the number of tokens a cache holding `base` must serve for each."""
    head = base[:100]
    other = [t + 1 for t in base[100:140]]
    return [
        (head, 96),  # the whole prompt again: 6 full blocks, the 7th holds the last token
        (base[:37] + other, 32),  # diverges inside block 2 (token 37)
        (base[:48] + other, 48),  # diverges at a block boundary
        (base[:64], 48),  # a 64-token prompt of 4 full blocks: its last token is computed (block 3 again)
        (base[:100] + other[:9], 96),  # the whole cached prompt then more
        (other, 0),
    ]


def test_greedy_outputs_match_without_caching_one_at_a_time(cached, uncached, base):
    cases = variants(base)
    run(cached, [base[:100]])  # what the cache holds
    got = one_at_a_time(cached, [p for p, _ in cases])
    want = one_at_a_time(uncached, [p for p, _ in cases])
    assert [c for _, c in got] == [hit for _, hit in cases]
    assert [t for t, _ in got] == [t for t, _ in want]
    assert all(c == 0 for _, c in want)


def test_greedy_outputs_match_without_caching_concurrently(cached, uncached, base):
    shifted = [t + 7 for t in base]  # a prefix the cache has not seen
    cases = variants(shifted)
    prompts = [shifted[:100]] + [p for p, _ in cases] * 2
    got = run(cached, prompts)
    want = run(uncached, prompts)
    assert [t for t, _ in got] == [t for t, _ in want]
    assert sum(c for _, c in got) > 0  # later admissions found what earlier ones computed
    for (p, hit), (_, c) in zip(cases, got[1 + len(cases):]):  # the 2nd wave found at least `base`'s blocks
        assert hit <= c <= (len(p) - 1) // BS * BS


def test_nothing_in_common_makes_the_same_model_calls(cached, uncached):
    """Prompts sharing nothing (with each other or with what the cache holds) reach the model in the
    same batches with caching on and off: same calls, same chunks, same shapes. Caching may cost only
    its bookkeeping there (issue 16: < 3% throughput); a different plan would cost far more."""
    prompts = [[1000 + 97 * i + j for j in range(60 + 53 * i)] for i in range(6)]  # 1,095 tokens: chunked
    shapes = {"on": [], "off": []}
    got = run(cached, prompts, greedy(12), shapes=shapes["on"])
    want = run(uncached, prompts, greedy(12), shapes=shapes["off"])
    assert all(c == 0 for _, c in got)
    assert got == want
    assert shapes["on"] == shapes["off"]
    assert max(sum(q) for q, _ in shapes["on"]) == 512  # the budget split the prompts


def test_cache_salt_separates_tenants(cached, base):
    prompt = [t + 3 for t in base[:90]]
    first = run(cached, [prompt], cache_salt="tenant-a")[0]
    assert first[1] == 0
    assert run(cached, [prompt], cache_salt="tenant-b")[0][1] == 0
    assert run(cached, [prompt])[0][1] == 0  # no salt is a tenant of its own
    again = run(cached, [prompt], cache_salt="tenant-a")[0]
    assert again == (first[0], 80)


def test_caching_off_computes_everything(uncached, base):
    assert run(uncached, [base[:80]] * 2)[1][1] == 0
    assert not uncached.blocks.pool.cached


@pytest.mark.parametrize("prompt_len", [83, 81, 80])  # partial last block; (P-1) on a boundary; full blocks
def test_n_choices_compute_the_prompt_once(uncached, base, prompt_len):
    """Choices 2..n wait for choice 1's prompt, share its blocks (copying a partial last block) and
    compute only the last prompt token; with caching off too (the sharing is within one request)."""
    eng = uncached
    prompt = [t + 11 for t in base[:prompt_len]]
    want = run(eng, [prompt])[0][0]
    rids = [f"n{prompt_len}-{i}" for i in range(4)]
    for i, rid in enumerate(rids):
        eng.add_request(rid, prompt, greedy(), share_prompt_with=rids[0] if i else None)
    toks = {r: [] for r in rids}
    cached = {}
    while eng.has_unfinished():
        for o in eng.step():
            toks[o.request_id].extend(o.new_token_ids)
            cached[o.request_id] = o.num_cached_tokens
    assert all(toks[r] == want for r in rids)
    # followers were held back until the prompt was computed, then computed only its last token
    assert [cached[r] for r in rids] == [0] + [prompt_len - 1] * 3
    pool = eng.blocks.pool
    assert pool.num_free == pool.num_blocks


def test_tiny_cache_preempts_and_evicts_yet_matches(uncached, base):
    """36 blocks for 12 requests over 3 shared prefixes: cached blocks are evicted under load, requests
    are preempted (and find their own computed blocks again), and no token changes."""
    small = engine(kv_cache_memory_bytes=36 * BLOCK_BYTES_FP32, max_num_seqs=8, max_num_batched_tokens=128)
    assert small.kv_spec.num_blocks == 36
    heads = [base[:70], [t + 5 for t in base[:70]], [t + 9 for t in base[:70]]]
    prompts = [heads[i % 3] + [200 + i, 300 + i, 400 + i] * (1 + i % 4) for i in range(12)]
    params = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)
    got = run(small, prompts, params)
    want = run(uncached, prompts, params)
    assert [t for t, _ in got] == [t for t, _ in want]
    assert small.scheduler.num_preemptions > 0
    assert sum(c for _, c in got) > 0
    distinct_full_blocks = sum((len(p) + 48) // BS for p in prompts)  # far more than the pool holds
    assert distinct_full_blocks > 2 * small.kv_spec.num_blocks
    pool = small.blocks.pool
    assert pool.num_free == pool.num_blocks and not any(pool.ref_counts)
    assert len(pool.cached) <= pool.num_blocks
