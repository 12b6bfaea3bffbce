"""Property tests of the scheduler and the fair LoRA queue, without a model (issue 14).

The example tests pin single scenarios; these draw random workloads (shared prefixes, n > 1
choices, priorities, adapters, staggered arrivals, aborts, pools small enough to preempt) and drive
the real `Scheduler` step by step in `LLMEngine.step`'s order, checking after every step that no KV
block leaks, the budgets hold, each chunk goes on where its request stopped and attends only to KV
computed for its own tokens, and that every workload ends within a bound of steps. A shadow of the
KV cache, `slot -> (adapter, tokens up to that position)`, stands in for the model.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, replace

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from llmop.engine.block_hash import BlockHasher
from llmop.engine.block_manager import BlockManager
from llmop.engine.lora.fair_queue import FairAdapterQueue, slot_admission
from llmop.engine.prefix_cache import PrefixCache
from llmop.engine.request import FinishReason, Request
from llmop.engine.sampling_params import SamplingParams
from llmop.engine.scheduler import Scheduler, SchedulerConfig, SchedulerOutput

PROPERTY = settings(max_examples=100, deadline=None, database=None)
VOCAB = 4  # few token ids, so prompts and outputs share prefixes often
_ids = itertools.count()


def build(config: SchedulerConfig, num_blocks: int, block_size: int, caching: bool = False,
          max_loras: int = 0) -> Scheduler:
    """The engine's construction seam; `max_loras` > 0: the fair adapter queue under that slot limit."""
    blocks = BlockManager(num_blocks, block_size, caching)
    prefix = PrefixCache(blocks, BlockHasher(block_size)) if caching else None
    queue = None
    if max_loras:
        queue = FairAdapterQueue(lambda a: slot_admission(
            a, {r.adapter for r in sched.running if r.adapter is not None}, set(), max_loras))
    sched = Scheduler(config, blocks, prefix, waiting=queue)
    return sched


def request(prompt, max_tokens: int, priority: int = 0, adapter: str | None = None,
            leader: Request | None = None) -> Request:
    return Request(f"r{next(_ids)}", list(prompt), SamplingParams(max_tokens=max_tokens), priority=priority,
                   adapter=adapter, prompt_leader=leader)


def step(sched: Scheduler, on_schedule=lambda out: None) -> SchedulerOutput:
    """One engine step: schedule; charge the fair queue (the engine does it while building the
    batch); commit; append the sampled token to each request whose chunk completes, and finish it
    at max_tokens. The "model" is greedy: the same tokens always sample the same next token."""
    out = sched.schedule()
    on_schedule(out)
    if isinstance(sched.waiting, FairAdapterQueue):
        sched.waiting.charge_chunks(out.chunks)
    sched.commit(out)
    for c in out.chunks:
        r = c.request
        if c.completes:
            r.output_token_ids.append(sum(r.prompt_token_ids + r.output_token_ids) % VOCAB)
            if len(r.output_token_ids) >= r.params.max_tokens:
                sched.finish(r, FinishReason.LENGTH)
    return out


# --- invariants 1-3 on random workloads ---------------------------------------------------------

@dataclass(frozen=True)
class Spec:
    """One request: added before step `arrival`, aborted before step `abort` if still live;
    `leader`: the index of an earlier spec it is another choice of (same prompt, n > 1)."""

    prompt: tuple[int, ...]
    max_tokens: int
    arrival: int = 0
    priority: int = 0
    adapter: str | None = None
    abort: int | None = None
    leader: int | None = None


@dataclass(frozen=True)
class Workload:
    specs: tuple[Spec, ...]
    config: SchedulerConfig
    num_blocks: int
    block_size: int
    caching: bool
    max_loras: int  # 0: the default priority queue

    def progress_bound(self) -> int:
        """Steps within which every request ends. With L_i = prompt + max_tokens of request i,
        N requests and L = sum L_i: after the last arrival, the most important live request R
        (priority, then arrival) waits at most L + N steps (no one is admitted ahead of it, so the
        running set only computes, at most L tokens, or shrinks by preemption, at most N times),
        then runs first, never preempted (it fits the pool alone), finishing within L_R steps.
        The fair queue is held to the same bound: it orders by counters that grow with every
        token computed, so an adapter waiting behind others comes to head the order."""
        lengths = [len(s.prompt) + s.max_tokens for s in self.specs]
        n, total = len(lengths), sum(lengths)
        return max(s.arrival for s in self.specs) + n * (total + n) + total + 1


@st.composite
def workloads(draw) -> Workload:
    block_size = draw(st.sampled_from([1, 2, 4]))
    tokens = st.integers(0, VOCAB - 1)
    bases = draw(st.lists(st.lists(tokens, min_size=12, max_size=12), min_size=1, max_size=2))
    specs: list[Spec] = []
    for i in range(draw(st.integers(1, 8))):
        leader = draw(st.none() | st.integers(0, i - 1)) if i else None
        if leader is not None:  # the engine gives another choice its first choice's prompt, adapter, priority
            first = specs[leader]
            spec = Spec(first.prompt, 1, first.arrival + draw(st.integers(0, 2)), first.priority, first.adapter,
                        leader=leader)
        else:
            head = draw(st.sampled_from(bases))[:draw(st.integers(0, 12))]
            tail = draw(st.lists(tokens, min_size=0 if head else 1, max_size=6))
            spec = Spec(tuple(head + tail), 1, draw(st.integers(0, 6)), draw(st.integers(-1, 1)),
                        draw(st.sampled_from([None, "a", "b", "c"])))
        specs.append(replace(spec, max_tokens=draw(st.integers(1, 8)), abort=draw(st.none() | st.integers(0, 30))))
    # Each request fits the pool on its own (it holds at most prompt + max_tokens - 1 tokens).
    fits = max(-(-(len(s.prompt) + s.max_tokens - 1) // block_size) for s in specs)
    config = SchedulerConfig(max_num_seqs=draw(st.integers(1, 4)), max_num_batched_tokens=draw(st.integers(1, 24)),
                             max_model_len=10_000, long_prefill_threshold=draw(st.sampled_from([0, 0, 3])))
    return Workload(tuple(specs), config, fits + draw(st.integers(0, 4)), block_size, draw(st.booleans()),
                    draw(st.integers(0, 3)))


def kv_identity(r: Request, position: int):
    """What the KV at `position` is computed from: the adapter and every token up to it."""
    return r.adapter, tuple(r.token_slice(0, position + 1))


def check_schedule(sched: Scheduler, out: SchedulerOutput, before: dict[str, int], kv: dict) -> None:
    """Invariant 2, between schedule() and the model; then the step's reads and writes on the KV shadow."""
    cfg, blocks, bs = sched.config, sched.blocks, sched.blocks.block_size
    ids = [c.request.request_id for c in out.chunks]
    assert len(ids) == len(set(ids)), f"a request scheduled twice in one step: {ids}"
    assert out.num_batched_tokens <= cfg.max_num_batched_tokens
    assert len(sched.running) <= cfg.max_num_seqs
    for r in out.preempted:
        assert r.request_id not in ids and r.num_computed_tokens == 0 and r.request_id not in blocks.tables
    for src, dst in out.block_copies:  # the device copies blocks before the step runs
        for off in range(bs):
            kv[dst * bs + off] = kv.get(src * bs + off)
    for c in out.chunks:
        r = c.request
        assert any(r is x for x in sched.running)
        assert c.num_tokens >= 1 and c.start == r.num_computed_tokens and c.start + c.num_tokens <= r.num_tokens
        if r.request_id in before:  # a running request goes on exactly where it stopped
            assert c.start == before[r.request_id], (r.request_id, c.start, before[r.request_id])
        assert len(blocks.tables[r.request_id]) >= blocks.blocks_for(c.start + c.num_tokens)
        for p in range(c.start):  # attention reads the request's earlier tokens
            assert kv.get(blocks.slot(r.request_id, p)) == kv_identity(r, p), f"{r.request_id} reads stale KV at {p}"
    for c in out.chunks:  # then the step writes its tokens, only into blocks no one else holds
        r, table = c.request, blocks.tables[c.request.request_id]
        for p in range(c.start, c.start + c.num_tokens):
            assert blocks.pool.ref_counts[table[p // bs]] == 1, f"{r.request_id} writes a shared block"
            kv[blocks.slot(r.request_id, p)] = kv_identity(r, p)


def check_blocks(sched: Scheduler) -> None:
    """Invariant 1: free blocks (cached-but-unreferenced ones included) plus the blocks the block
    tables hold make the whole pool; reference counts are exactly the tables' holdings; only
    running requests hold blocks."""
    pool, tables = sched.blocks.pool, sched.blocks.tables
    held = Counter(b for t in tables.values() for b in t)
    assert pool.num_free + len(held) == pool.num_blocks, f"leak: {pool.num_free} free + {len(held)} held"
    assert [pool.ref_counts[b] for b in range(pool.num_blocks)] == [held[b] for b in range(pool.num_blocks)]
    assert set(tables) == {r.request_id for r in sched.running}


def run(w: Workload) -> int:
    """Drive the workload to its end, checking every step; returns the steps it took."""
    sched = build(w.config, w.num_blocks, w.block_size, w.caching, w.max_loras)
    reqs: list[Request | None] = [None] * len(w.specs)
    last_arrival, bound, kv = max(s.arrival for s in w.specs), w.progress_bound(), {}
    for t in itertools.count():
        for i, s in enumerate(w.specs):
            if s.arrival == t:
                leader = reqs[s.leader] if s.leader is not None else None
                reqs[i] = request(s.prompt, s.max_tokens, s.priority, s.adapter,
                                  leader if leader is not None and not leader.is_finished else None)
                sched.add(reqs[i])
            if s.abort == t and reqs[i] is not None and not reqs[i].is_finished:
                sched.finish(reqs[i], FinishReason.ABORT)
                check_blocks(sched)
        if t >= last_arrival and all(r.is_finished for r in reqs):
            break
        assert t < bound, f"livelock: {sum(not r.is_finished for r in reqs if r)} requests live after {t} steps"
        before = {r.request_id: r.num_computed_tokens for r in sched.running}
        step(sched, lambda out: check_schedule(sched, out, before, kv))
        check_blocks(sched)
    assert sched.blocks.pool.num_free == w.num_blocks and not sched.blocks.tables
    assert not sched.has_work() and sched.num_waiting == 0
    return t


@PROPERTY
@given(workloads())
def test_no_leak_budgets_kept_and_every_workload_ends(w):
    run(w)


# --- invariant 4: the fair queue bounds a trickle's wait under a flood -----------------------------

@dataclass(frozen=True)
class FloodAndTrickle:
    """Adapter "flood" keeps max_num_seqs requests running and more waiting from step 0; adapter
    "trickle" sends one request at a time, `idle` steps after its previous one finished (the first
    after step 0). Budget and blocks are ample: every prefill is one chunk, nothing is preempted."""

    max_num_seqs: int
    max_loras: int
    flood: tuple[tuple[int, int], ...]  # (prompt length, max_tokens), cycled
    trickle: tuple[tuple[int, int, int], ...]  # (prompt length, max_tokens, idle)

    def wait_bound(self) -> int:
        """Steps from a trickle request's arrival to its admission, with S = max_num_seqs >= 2,
        prompts of P >= 2 tokens, M_f the flood's largest max_tokens and P_t the trickle's largest
        prompt. Every scheduled chunk raises its adapter's counter by at least 2 (a prefill P x 1,
        a decode 1 x 2), so the flood's rises at least 2(S-1) a step beside a running trickle
        request (which adds 2 per decode) and 2S while none runs. A trickle request is admitted
        only while its counter is strictly below the flood's (ties go to the older flood head), so
        its prefill leaves the trickle at most P_t - 2(S-1) - 1 ahead, a lead that only shrinks
        until the next arrives, and arriving lifts it to no less than the flood's. After
        j = lead // 2S + 1 steps the trickle heads the order; all S running requests were then
        admitted at least one step before, so one frees its slot within M_f steps:
            wait <= max(0, P_t - 2S + 1) // 2S + M_f.
        A FIFO queue makes the trickle wait for the whole flood ahead of it."""
        s, lead = self.max_num_seqs, max(0, max(p for p, _, _ in self.trickle) - 2 * self.max_num_seqs + 1)
        return lead // (2 * s) + max(m for _, m in self.flood)

    def trickle_waits(self, fair: bool, patience: int) -> list[int | None]:
        """Each trickle request's wait in steps; None (and no further requests) once one has
        waited `patience` steps."""
        longest = max(p + m for p, m in self.flood + tuple((p, m) for p, m, _ in self.trickle))
        sched = build(SchedulerConfig(self.max_num_seqs, self.max_num_seqs * (longest + 1), 10_000),
                      num_blocks=self.max_num_seqs * longest + 1, block_size=1,
                      max_loras=self.max_loras if fair else 0)
        horizon = sum(idle + patience + m + 1 for _, m, idle in self.trickle)
        for p, m in itertools.islice(itertools.cycle(self.flood), self.max_num_seqs * horizon):
            sched.add(request([1] * p, m, adapter="flood"))  # each slot takes at most one a step
        waits = []
        for p, m, idle in self.trickle:
            for _ in range(idle + 1):
                step(sched)
            r = request([1] * p, m, adapter="trickle")
            sched.add(r)
            for wait in range(patience):
                if any(c.request is r for c in step(sched).chunks):
                    waits.append(wait)
                    break
            else:
                return waits + [None]
            while not r.is_finished:
                step(sched)
            assert len(sched.waiting) > 0, "the flood ran dry"
        return waits


@st.composite
def floods(draw) -> FloodAndTrickle:
    """Two adapters under a slot limit that fits both; prompts of 2..16 tokens, 1..8 new tokens."""
    prompt, new_tokens = st.integers(2, 16), st.integers(1, 8)
    flood = draw(st.lists(st.tuples(prompt, new_tokens), min_size=1, max_size=4))
    trickle = draw(st.lists(st.tuples(prompt, new_tokens, st.integers(0, 5)), min_size=1, max_size=3))
    return FloodAndTrickle(draw(st.integers(2, 4)), draw(st.integers(2, 4)), tuple(flood), tuple(trickle))


def assert_trickle_served(case: FloodAndTrickle, fair: bool = True) -> None:
    bound = case.wait_bound()
    waits = case.trickle_waits(fair, patience=4 * bound + 1)
    assert all(w is not None and w <= bound for w in waits), f"waits {waits}, bound {bound}"


@PROPERTY
@given(floods())
def test_fair_queue_admits_a_trickle_within_the_bound(case):
    assert_trickle_served(case)


FLOOD = FloodAndTrickle(max_num_seqs=2, max_loras=2, flood=((2, 1), (2, 3)), trickle=((2, 1, 0),))


def test_fifo_makes_the_trickle_wait_for_the_flood():
    """The bound above is tight enough to tell (the fair queue reaches it on some drawn cases):
    the default priority queue violates it."""
    assert_trickle_served(FLOOD)
    with pytest.raises(AssertionError, match="waits"):
        assert_trickle_served(FLOOD, fair=False)


def test_fair_queue_admits_a_trickle_when_the_flood_holds_every_slot():
    """The case hypothesis shrank to with max_loras = 1: flood requests alternate max_tokens 1
    and 3, so the two running flood requests never end in the same step. Before the queue held
    other adapters back behind one waiting for a slot, the trickle waited for the whole flood."""
    assert_trickle_served(replace(FLOOD, max_loras=1))
