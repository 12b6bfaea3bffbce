"""Scheduling policy without a model: budgets, admission, chunked prefill, priority, preemption."""

from llmop.engine.block_manager import BlockManager
from llmop.engine.request import Request, RequestStatus
from llmop.engine.sampling_params import SamplingParams
from llmop.engine.scheduler import Scheduler, SchedulerConfig


def make(num_blocks=64, block_size=4, max_num_seqs=4, budget=32):
    return Scheduler(SchedulerConfig(max_num_seqs, budget, 10_000), BlockManager(num_blocks, block_size))


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


def test_out_of_blocks_preempts_the_newest_and_recomputes_it():
    s = make(num_blocks=4, block_size=4, max_num_seqs=4, budget=100)
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
    assert [(c.request.request_id, c.start, c.num_tokens) for c in out.chunks] == [("new", 0, 9)]


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
