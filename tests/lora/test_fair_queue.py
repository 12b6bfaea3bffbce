"""Fairness across adapters and the distinct-adapter limit, on the real scheduler without a model.

A step loop drives the scheduler as the engine does (schedule, commit, one token per completing
chunk); waits are counted in scheduler steps, never in seconds.
"""

import itertools

from llmop.engine.block_manager import BlockManager
from llmop.engine.lora.fair_queue import FairAdapterQueue, slot_admission
from llmop.engine.request import Request
from llmop.engine.sampling_params import SamplingParams
from llmop.engine.scheduler import Scheduler, SchedulerConfig

_ids = itertools.count()


def request(adapter, prompt_len=16, max_tokens=8):
    return Request(f"r{next(_ids)}", [1] * prompt_len, SamplingParams(max_tokens=max_tokens), adapter=adapter)


def make_scheduler(fair: bool, max_loras=4, max_num_seqs=4):
    running: list = []  # the scheduler's running list, bound once it exists
    queue = FairAdapterQueue(
        lambda a: slot_admission(a, {r.adapter for r in running if r.adapter}, set(), max_loras)) if fair else None
    sched = Scheduler(SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=64, max_model_len=256),
                      BlockManager(256, 16), waiting=queue)
    running = sched.running
    return sched


def run(sched, arrivals, num_steps):
    """arrivals: step -> requests added before that step. Returns (admission step - arrival step)
    per request and the distinct adapters of every step."""
    arrived, waits, per_step = {}, {}, []
    for step in range(num_steps):
        for r in arrivals.get(step, []):
            arrived[r.request_id] = step
            sched.add(r)
        out = sched.schedule()
        if isinstance(sched.waiting, FairAdapterQueue):
            sched.waiting.charge_chunks(out.chunks)
        sched.commit(out)
        per_step.append({c.request.adapter for c in out.chunks})
        for c in out.chunks:
            waits.setdefault(c.request.request_id, step - arrived[c.request.request_id])
            if c.completes:
                c.request.output_token_ids.append(0)
                if len(c.request.output_token_ids) >= c.request.params.max_tokens:
                    sched.finish(c.request, "length")
    return arrived, waits, per_step


def flood_and_trickle(fair):
    arrivals = {0: [request("flood") for _ in range(60)]}
    trickle = []
    for step in range(5, 150, 10):
        r = request("trickle")
        trickle.append(r.request_id)
        arrivals.setdefault(step, []).append(r)
    _, waits, _ = run(make_scheduler(fair), arrivals, 160)
    return [waits.get(rid, 10**9) for rid in trickle]


def test_a_trickle_is_not_starved_by_a_flooding_adapter():
    fair = flood_and_trickle(fair=True)
    # Bounded by the time one running request needs to finish (prefill + 8 decodes), whatever the flood.
    assert max(fair) <= 10, fair
    # The FCFS queue, same traffic: the trickle waits behind the whole flood, so this test can fail.
    fcfs = flood_and_trickle(fair=False)
    assert max(fcfs) > 50, fcfs


def test_counters_follow_tokens_and_an_idle_adapter_banks_no_credit():
    q = FairAdapterQueue()
    q.push(request("a"))
    q.charge("a", prompt_tokens=100, output_tokens=10)
    assert q.counters["a"] == 120
    q.push(request("b"))  # joins while a waits: lifted to a's counter, not left at 0
    assert q.counters["b"] == 120
    q.charge("b", 0, 1)
    assert q.pop().adapter == "a"  # the smaller counter goes first


def test_at_most_max_loras_distinct_adapters_run_together():
    arrivals = {0: [request(f"a{i % 6}") for i in range(24)] + [request(None) for _ in range(4)]}
    _, waits, per_step = run(make_scheduler(True, max_loras=2, max_num_seqs=8), arrivals, 200)
    assert len(waits) == 28, "every request ran"
    assert all(len(s - {None}) <= 2 for s in per_step)
    assert any(None in s and len(s) == 3 for s in per_step), "base requests ride along with two adapters"


def test_an_adapter_that_can_never_get_a_slot_holds_nobody_back():
    """max_loras 1, held by pinned "p": a request of "a" can never run (the engine refuses it at
    add_request); in the queue it must not block "p"'s requests behind it (it did, for ever)."""
    q = FairAdapterQueue(lambda a: slot_admission(a, set(), {"p"}, 1))
    first, later = request("a"), request("p")
    q.push(first)
    q.push(later)
    assert q.peek() is later
