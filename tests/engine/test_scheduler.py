"""Scheduling policy without a model: budgets, admission, chunked prefill, priority, preemption,
prefix-cache admission and n > 1 choices sharing a prompt."""

import random

import pytest

from llmop.engine.block_hash import BlockHasher
from llmop.engine.block_manager import BlockManager
from llmop.engine.prefix_cache import PrefixCache
from llmop.engine.request import Request, RequestStatus
from llmop.engine.sampling_params import SamplingParams
from llmop.engine.scheduler import Scheduler, SchedulerConfig


def make(num_blocks=64, block_size=4, max_num_seqs=4, budget=32, caching=True):
    blocks = BlockManager(num_blocks, block_size, caching)
    return Scheduler(SchedulerConfig(max_num_seqs, budget, 10_000), blocks, PrefixCache(blocks, BlockHasher(block_size)))


def req(rid, n_prompt, priority=0):
    return Request(rid, list(range(1, n_prompt + 1)), SamplingParams(max_tokens=100), priority=priority)


def run_step(s):
    """Schedule, pretend the model ran, and append one token to each request that completed."""
    out = s.schedule()
    s.commit(out)
    for c in out.chunks:
        if c.completes:
            c.request.output_token_ids.append(7)
    return out


def test_long_prompt_is_chunked_under_the_token_budget():
    s = make(budget=16)
    r = req("a", 40)
    s.add(r)
    sizes = [run_step(s).num_batched_tokens for _ in range(3)]
    assert sizes == [16, 16, 8]
    assert r.output_token_ids == [7]  # only the last chunk samples
    assert run_step(s).chunks[0].num_tokens == 1  # then it decodes


def test_decodes_and_prefill_share_a_step():
    s = make(budget=16)
    a, b = req("a", 4), req("b", 30)
    s.add(a)
    run_step(s)
    s.add(b)
    out = run_step(s)
    assert [(c.request.request_id, c.num_tokens) for c in out.chunks] == [("a", 1), ("b", 15)]


def test_max_num_seqs_bounds_the_running_set():
    s = make(max_num_seqs=2, budget=100)
    for i in range(5):
        s.add(req(f"r{i}", 3))
    run_step(s)
    assert len(s.running) == 2 and len(s.waiting) == 3


def test_priority_then_arrival_order():
    s = make(max_num_seqs=1, budget=100)
    s.add(req("late-normal", 3, priority=0))
    s.add(req("urgent", 3, priority=-1))
    s.add(req("later-normal", 3, priority=0))
    out = run_step(s)
    assert out.chunks[0].request.request_id == "urgent"


@pytest.mark.parametrize("caching", [False, True])
def test_out_of_blocks_preempts_the_newest_and_recomputes_it(caching):
    s = make(num_blocks=4, block_size=4, max_num_seqs=4, budget=100, caching=caching)
    old, new = req("old", 8), req("new", 8)
    s.add(old)
    s.add(new)
    run_step(s)  # both fill 2 blocks (8 slots) and sample a 9th token
    assert s.blocks.pool.num_free == 0
    out = run_step(s)  # computing token 9 needs a 3rd block each: the newest gives way
    assert [r.request_id for r in out.preempted] == ["new"]
    assert new.status is RequestStatus.PREEMPTED and new.num_computed_tokens == 0
    assert [c.request.request_id for c in out.chunks] == ["old"]
    assert new.output_token_ids == [7]  # its generated token is kept and recomputed as prompt
    s.finish(old, "stop")
    out = run_step(s)
    # recomputed from scratch, or, with caching, after the 2 full blocks its preemption left cached
    assert [(c.request.request_id, c.start, c.num_tokens) for c in out.chunks] == [("new", 8 if caching else 0, 9 - (8 if caching else 0))]


def test_finish_and_abort_free_blocks_wherever_the_request_is():
    s = make(max_num_seqs=1)
    a, b = req("a", 5), req("b", 5)
    s.add(a)
    s.add(b)
    run_step(s)
    s.finish(b, "abort")  # waiting
    s.finish(a, "abort")  # running
    assert s.blocks.pool.num_free == s.blocks.pool.num_blocks
    assert not s.has_work()


def test_a_request_starts_after_its_longest_cached_prefix():
    s = make(budget=100)
    a = req("a", 14)
    s.add(a)
    run_step(s)
    s.finish(a, "stop")  # its 3 full blocks (12 tokens) stay cached
    b = Request("b", list(range(1, 11)) + [99] * 6, SamplingParams(max_tokens=5))
    s.add(b)
    out = run_step(s)
    assert [(c.start, c.num_tokens) for c in out.chunks] == [(8, 8)]  # blocks 0-1 shared, block 2 differs
    assert b.num_cached_tokens == 8 and s.prefix.queries == 14 + 16 and s.prefix.hits == 8
    same = req("same", 12)  # all 3 blocks cached, but the last token is computed: 2 blocks reused
    s.add(same)
    assert [(c.start, c.num_tokens) for c in run_step(s).chunks if c.request is same] == [(8, 4)]


def test_caching_off_starts_from_zero():
    s = make(budget=100, caching=False)
    for rid in ("a", "b"):
        r = req(rid, 14)
        s.add(r)
        out = run_step(s)
        assert [(c.start, c.num_tokens) for c in out.chunks if c.request is r] == [(0, 14)]
        s.finish(r, "stop")


def n_choices(s, prompt_len, n=3):
    leader = req("c0", prompt_len)
    followers = [Request(f"c{i}", list(leader.prompt_token_ids), leader.params, prompt_leader=leader)
                 for i in range(1, n)]
    for r in [leader, *followers]:
        s.add(r)
    return leader, followers


def test_n_choices_wait_for_the_prompt_then_share_it_copying_the_partial_block():
    s = make(budget=8, caching=False)  # the sharing needs no cache
    leader, followers = n_choices(s, 11)
    assert s.num_waiting == 3 and len(s.waiting) == 1
    out = run_step(s)  # a chunk of 8 of the leader's 11 tokens; the followers stay parked
    assert [c.request for c in out.chunks] == [leader]
    out = run_step(s)
    assert [c.request for c in out.chunks] == [leader] and len(s.waiting) == 2  # prompt done: released
    out = run_step(s)
    assert [(c.request.request_id, c.start, c.num_tokens) for c in out.chunks] == [
        ("c0", 11, 1), ("c1", 10, 1), ("c2", 10, 1)]
    table = s.blocks.tables
    assert table["c1"][:2] == table["c2"][:2] == table["c0"][:2]  # tokens 0-7 shared
    assert out.block_copies == ((table["c0"][2], table["c1"][2]), (table["c0"][2], table["c2"][2]))
    assert [f.num_cached_tokens for f in followers] == [10, 10]


def test_n_choices_need_no_copy_when_the_shared_tokens_end_on_a_block():
    s = make(budget=100)
    leader, followers = n_choices(s, 9)  # followers share tokens 0-7 (2 blocks) and compute token 8
    run_step(s)
    out = run_step(s)
    assert out.block_copies == () and {(c.start, c.num_tokens) for c in out.chunks if c.request in followers} == {(8, 1)}


def test_followers_of_an_aborted_leader_are_released_and_use_the_cache():
    s = make(budget=8)
    leader, followers = n_choices(s, 14)
    run_step(s)  # 8 tokens computed: 2 blocks cached
    s.finish(leader, "abort")
    assert len(s.waiting) == 2
    out = run_step(s)
    assert [(c.request.request_id, c.start) for c in out.chunks] == [("c1", 8), ("c2", 8)]
    s.finish(followers[0], "abort")
    s.finish(followers[1], "abort")  # parked or waiting, a follower ends cleanly
    assert not s.has_work() and s.blocks.pool.num_free == s.blocks.pool.num_blocks


def drive(s, prompts, max_tokens) -> list[tuple[tuple[int, int, int], ...]]:
    """Run `prompts` to their end (`max_tokens` each, in order); every step's plan as (prompt index,
    start, tokens) per chunk."""
    reqs = [Request(f"{p[0]}-{i}", p, SamplingParams(max_tokens=m))
            for i, (p, m) in enumerate(zip(prompts, max_tokens))]
    index = {r.request_id: i for i, r in enumerate(reqs)}
    for r in reqs:
        s.add(r)
    plan = []
    while s.has_work():
        out = run_step(s)
        assert not out.preempted
        plan.append(tuple((index[c.request.request_id], c.start, c.num_tokens) for c in out.chunks))
        for r in {c.request for c in out.chunks}:
            if len(r.output_token_ids) == r.params.max_tokens:
                s.finish(r, "length")
    return plan


def test_nothing_in_common_is_planned_as_without_caching():
    """With nothing shared, caching changes no step: the same chunks, decodes and admissions as with
    caching off, even beside blocks other requests left cached. Every full block computed, prompt
    or output, ends up cached (the bookkeeping skips only steps that filled no block)."""
    rng = random.Random(16)
    prompts = [[rng.randrange(1000, 9000) for _ in range(rng.randint(3, 30))] for _ in range(10)]
    lengths = [rng.randint(1, 12) for _ in prompts]
    warm = [[500 + i] * 10 for i in range(3)]
    plans = {}
    for caching in (True, False):
        s = make(num_blocks=256, block_size=4, max_num_seqs=4, budget=16, caching=caching)
        drive(s, warm, [6] * 3)  # the cache now holds other requests' blocks
        plans[caching] = drive(s, prompts, lengths)
        assert s.prefix.hits == 0
        # each request computed its prompt and all outputs but the last: those tokens' full blocks
        want = sum((len(p) + n - 1) // 4 for p, n in zip(warm + prompts, [6] * 3 + lengths)) if caching else 0
        assert len(s.blocks.pool.cached) == want
    assert plans[True] == plans[False]
    assert any(len(step) > 1 and any(n > 1 for _, _, n in step) for step in plans[True])  # prefills beside decodes
