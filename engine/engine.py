"""The engine core: add requests, step (schedule → run → postprocess), abort.

Single-threaded by design; `async_engine.AsyncEngine` runs it on a background thread for the
server. The core holds the scheduler, the block manager and the detokenizers; the model runs behind
an `Executor` (in this process, or one worker process per tensor-parallel rank), which gets one
plain-data `ForwardBatch` per step. One step finishes requests (EOS, stop ids, stop strings,
max_tokens, max_model_len) and frees their blocks in the same step, so the pool is always exact.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass

import torch

from llmop.engine.attention import resolve_attention_backend
from llmop.engine.block_hash import BlockHasher, get_hash_fn
from llmop.engine.block_manager import BlockManager
from llmop.engine.checkpoint import Checkpoint, open_checkpoint
from llmop.engine.config import EngineConfig
from llmop.engine.detokenizer import IncrementalDetokenizer
from llmop.engine.device_caps import resolve_device, resolve_precision
from llmop.engine.draft_proposer import build_draft_proposer
from llmop.engine.executor import Executor, build_executor
from llmop.engine.forward_batch import ForwardBatch, build_forward_batch
from llmop.engine.grammar.compiler import GrammarCompiler
from llmop.engine.grammar.matcher import GrammarMatcher, fill_bitmasks
from llmop.engine.kv_cache import KVCacheSpec, plan_kv_cache, resolve_kv_dtype
from llmop.engine.lora.manager import LoraManager
from llmop.engine.outputs import RequestOutput, TokenLogprob
from llmop.engine.ngram_proposer import NgramProposer
from llmop.engine.prefix_cache import PrefixCache
from llmop.engine.proposer import Proposer
from llmop.engine.request import FinishReason, Request, RequestStatus
from llmop.engine.sampler import SampleRow
from llmop.engine.sampling_params import SamplingParams
from llmop.engine.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from llmop.engine.speculator import Speculator
from llmop.engine.tokenizer import TextTokenizer
from llmop.engine.tp.shard import check_tensor_parallel, rank_config

log = logging.getLogger("llmop.engine")


@dataclass
class _Tracked:
    request: Request
    detok: IncrementalDetokenizer
    grammar: GrammarMatcher | None = None


@dataclass(frozen=True)
class EngineStats:
    num_waiting: int
    num_running: int
    num_free_blocks: int
    num_total_blocks: int
    num_preemptions: int
    oldest_waiting_arrival: float | None
    prefix_cache_queries: int = 0  # prompt tokens looked up at first admission
    prefix_cache_hits: int = 0  # of those, tokens not computed (cached, or shared by n > 1 choices)
    spec_drafts: int = 0  # speculative decoding: requests × steps that verified proposals
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    spec_accepted_by_position: tuple[int, ...] = ()


class LLMEngine:
    def __init__(self, config: EngineConfig | None = None, **overrides):
        # Validated, so keyword overrides are checked like a config file (model_copy would not).
        config = EngineConfig.model_validate({**(config or EngineConfig()).model_dump(), **overrides})
        t0 = time.monotonic()
        self.device = resolve_device(config.device)
        precision = resolve_precision(config.dtype, config.quantization, self.device)
        log.info("dtype %s, quantization %s (%s)", precision.dtype_name, precision.quantization, precision.reason)
        # Decided once: the ranks, the draft model and the logs get concrete names, never `auto`.
        config = config.model_copy(update={"dtype": precision.dtype_name, "quantization": precision.quantization})
        self.config, self.dtype = config, precision.dtype
        self.kv_dtype = resolve_kv_dtype(config.kv_cache_dtype, self.dtype,
                                         resolve_attention_backend(config.attention_backend, self.device))
        self.checkpoint: Checkpoint = open_checkpoint(config.model)
        self.model_name = config.served_model_name or self.checkpoint.name
        mcfg = self.checkpoint.config
        check_tensor_parallel(mcfg, config.tensor_parallel_size)  # before any worker starts
        self.tokenizer = TextTokenizer(self.checkpoint)
        self.executor: Executor = build_executor(config, self.kv_dtype, self.tokenizer.eos_token_ids)
        try:
            self._start(config, mcfg, t0)
        except BaseException:
            self.executor.shutdown()  # no worker process outlives a failed start
            raise

    def _start(self, config: EngineConfig, mcfg, t0: float) -> None:
        """Everything after the executor exists: KV plan, scheduler, LoRA, grammars."""
        self._plan_kv(mcfg)
        self.vocab_size = mcfg.vocab_size
        self._tracked: dict[str, _Tracked] = {}
        self.last_batch: ForwardBatch | None = None
        self.last_step_ran = False  # the last step computed something (False: every request waited)
        self.grammars = GrammarCompiler(self.tokenizer, mcfg.vocab_size)
        # Requests whose grammar is still compiling (on the compiler's threads): they join the
        # scheduler when it is ready, so they wait without holding up anyone else.
        self._compiling: dict[str, tuple[_Tracked, Future]] = {}
        self.lora = LoraManager(config, mcfg, self.dtype, lambda: (self.scheduler.running, self.scheduler.waiting))
        self.blocks = BlockManager(self.kv_spec.num_blocks, config.block_size, config.enable_prefix_caching)
        self.speculator = Speculator(config.speculative, self.max_model_len, self._proposer(config, mcfg))
        hasher = BlockHasher(config.block_size, get_hash_fn(config.prefix_caching_hash))
        self.scheduler = Scheduler(
            SchedulerConfig(config.max_num_seqs, max(config.max_num_batched_tokens, config.max_num_seqs),
                            self.max_model_len),
            self.blocks,
            PrefixCache(self.blocks, hasher),
            waiting=self.lora.queue,  # the fair adapter queue when LoRA is on, else priority order
            on_release=self.speculator.release,
        )
        for a in config.adapters:
            self.lora.add_configured(a.name, a.source, a.pinned)
        self.load_seconds = time.monotonic() - t0
        for info in self.executor.describe():
            log.info("rank %d (pid %d, %s): %s weights%s, %d of %d attention heads, %d of %d KV heads, "
                     "KV cache %s %d blocks (%.1f MiB)", info.rank, info.pid, info.device, info.dtype,
                     f", {info.int8_layers} int8 layers" if info.int8_layers else "", info.num_heads,
                     mcfg.num_heads, info.num_kv_heads, mcfg.num_kv_heads, info.kv_dtype, info.num_blocks,
                     info.kv_bytes / 2**20)
        log.info(
            "engine ready: model=%s dtype=%s device=%s tensor_parallel_size=%d load=%.1fs | KV cache (%s): "
            "%d blocks x %d tokens = %d tokens (%.1f MiB per rank); max_model_len=%d -> %d concurrent sequences "
            "at full length",
            self.model_name, str(self.dtype).removeprefix("torch."), self.device, config.tensor_parallel_size,
            self.load_seconds, str(self.kv_dtype).removeprefix("torch."),
            self.kv_spec.num_blocks, self.kv_spec.block_size, self.kv_spec.num_tokens,
            self.kv_spec.num_blocks * self.kv_spec.bytes_per_block / 2**20, self.max_model_len,
            self.kv_spec.max_concurrent_seqs(self.max_model_len),
        )

    def _plan_kv(self, mcfg) -> None:
        """KV blocks per rank: `kv_cache_memory_bytes` is each rank's (each GPU's) budget, as the
        operator computes it; every rank holds its KV heads' share of every block."""
        config = self.config
        budget = config.kv_cache_memory_bytes or int(config.kv_cache_memory_fraction * self.executor.free_memory())
        self.kv_spec: KVCacheSpec = plan_kv_cache(rank_config(mcfg, config.tensor_parallel_size), self.kv_dtype,
                                                  config.block_size, budget)
        limit = min(mcfg.max_position_embeddings, mcfg.sliding_window or mcfg.max_position_embeddings)
        self.max_model_len = min(config.max_model_len or limit, limit, self.kv_spec.num_tokens)
        self.executor.allocate(self.kv_spec)

    def _proposer(self, config: EngineConfig, mcfg) -> Proposer | None:
        """The speculative proposer the config names (None: speculation off)."""
        spec = config.speculative
        if spec is None:
            return None
        if spec.method == "ngram":
            return NgramProposer(spec.ngram_min, spec.ngram_max)
        return build_draft_proposer(config, self.kv_dtype, mcfg, self.tokenizer, self.kv_spec.num_blocks,
                                    self.max_model_len, self.tokenizer.eos_token_ids)

    @property
    def failure(self) -> str | None:
        """Why the engine cannot step any more (a worker process died or hung), else None."""
        return self.executor.failure

    def shutdown(self) -> None:
        """Stop the worker processes (if any); the engine cannot step afterwards."""
        self.executor.shutdown()

    # --- requests ---------------------------------------------------------------------------------

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    priority: int = 0, adapter: str | None = None, arrival_time: float | None = None,
                    cache_salt: str | None = None, share_prompt_with: str | None = None) -> Request:
        """Queue a request. `cache_salt`: it shares cached KV only with requests of the same salt.
        `share_prompt_with`: the id of an earlier request with the same prompt (another choice of one
        OpenAI request); this one waits until that one has computed the prompt and then shares it."""
        if request_id in self._tracked:
            raise ValueError(f"duplicate request id {request_id!r}")
        if not prompt_token_ids:
            raise ValueError("the prompt must contain at least one token")
        if len(prompt_token_ids) + params.max_tokens > self.max_model_len:
            raise ValueError(
                f"prompt ({len(prompt_token_ids)} tokens) + max_tokens ({params.max_tokens}) exceeds "
                f"max_model_len {self.max_model_len} by {len(prompt_token_ids) + params.max_tokens - self.max_model_len}"
            )
        bad = [t for t in prompt_token_ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"prompt token id {bad[0]} is outside the vocabulary (0..{self.vocab_size - 1})")
        params.check_vocab(self.vocab_size)
        self.lora.check_request(adapter)
        grammar = self.grammars.submit(params.grammar) if params.grammar is not None else None
        if grammar is not None and grammar.done() and grammar.exception() is not None:
            raise grammar.exception()  # a GrammarError (ValueError): the caller's 400
        leader = self._leader(share_prompt_with, prompt_token_ids, adapter, cache_salt)
        req = Request(request_id, list(prompt_token_ids), params, priority=priority, adapter=adapter,
                      adapter_generation=self.lora.generation(adapter), cache_salt=cache_salt,
                      prompt_leader=leader)
        if arrival_time is not None:
            req.times.arrival = arrival_time
        detok = IncrementalDetokenizer(self.tokenizer, req.prompt_token_ids, params.stop,
                                       params.skip_special_tokens, params.include_stop_str_in_output)
        tracked = _Tracked(req, detok)
        self._tracked[request_id] = tracked
        if grammar is None:
            self.scheduler.add(req)
        else:
            self._compiling[request_id] = (tracked, grammar)
            self._admit_compiled()
        return req

    def _leader(self, request_id: str | None, prompt: list[int], adapter: str | None,
                cache_salt: str | None) -> Request | None:
        """The running or waiting request a new one may share its prompt with (None: none fits)."""
        t = self._tracked.get(request_id) if request_id is not None else None
        if t is None:
            return None
        r = t.request
        if r.prompt_token_ids != list(prompt) or r.adapter != adapter or r.cache_salt != cache_salt:
            raise ValueError(f"share_prompt_with {request_id!r}: that request has another prompt, adapter or salt")
        return r

    def _admit_compiled(self) -> list[RequestOutput]:
        """Requests whose grammar finished compiling join the scheduler; those whose grammar
        failed end with error "invalid_grammar" and the grammar engine's message."""
        failed = []
        for rid, (t, fut) in list(self._compiling.items()):
            if not fut.done():
                continue
            del self._compiling[rid]
            if fut.exception() is None:
                t.grammar = GrammarMatcher(fut.result())
                self.scheduler.add(t.request)
                continue
            del self._tracked[rid]
            self.scheduler.finish(t.request, FinishReason.ABORT)
            failed.append(dataclasses.replace(self._output(t, (), "", ()), error="invalid_grammar",
                                              error_message=str(fut.exception())))
        return failed

    def abort(self, request_id: str) -> RequestOutput | None:
        """Stop a request now and free its blocks; returns its final output, None if unknown."""
        t = self._tracked.pop(request_id, None)
        if t is None:
            return None
        self._compiling.pop(request_id, None)
        self.scheduler.finish(t.request, FinishReason.ABORT)
        return self._output(t, (), "", ())

    def expire_waiting(self, arrived_before: float) -> list[RequestOutput]:
        """End every request still waiting for its first schedule that arrived before the cutoff
        (finish_reason "abort", error "queue_timeout")."""
        return self._end_waiting(lambda r: r.times.arrival < arrived_before, "queue_timeout")

    def _end_waiting(self, which, error: str, message=lambda request: None) -> list[RequestOutput]:
        """End the never-scheduled requests `which(request)` selects, with `error` and a message."""
        ended = [t for t in self._tracked.values() if t.request.times.first_scheduled is None and which(t.request)]
        outs = []
        for t in ended:
            del self._tracked[t.request.request_id]
            self._compiling.pop(t.request.request_id, None)
            self.scheduler.finish(t.request, FinishReason.ABORT)
            outs.append(dataclasses.replace(self._output(t, (), "", ()), error=error,
                                            error_message=message(t.request)))
        return outs

    def _fail_unservable(self) -> list[RequestOutput]:
        """Waiting requests of an adapter that failed since the last step (its reload from disk, or
        its load through the admin API) end now with the adapter's error, not at the queue deadline."""
        failed = self.lora.take_failed()
        if not failed:
            return []
        return self._end_waiting(lambda r: r.adapter in failed, "adapter_unavailable",
                                 lambda r: self.lora.unavailable_reason(r.adapter))

    def has_unfinished(self) -> bool:
        return bool(self._tracked)

    def stats(self) -> EngineStats:
        s, n = self.scheduler, self.speculator.counters
        return EngineStats(s.num_waiting, len(s.running), self.blocks.pool.num_free,
                           self.blocks.pool.num_blocks, s.num_preemptions, s.oldest_waiting_arrival(),
                           s.prefix.queries, s.prefix.hits, n.drafts, n.draft_tokens, n.accepted_tokens,
                           tuple(n.accepted_by_position))

    # --- the step ---------------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        if self._compiling and not self.scheduler.has_work():
            # Nothing else to run: wait (briefly, so aborts and new requests are still seen) for a grammar.
            wait([f for _, f in self._compiling.values()], timeout=0.05, return_when=FIRST_COMPLETED)
        compiled = self._admit_compiled()
        self.lora.prefetch()  # adapters evicted to disk are read back before, never inside, schedule()
        self.speculator.propose(self.scheduler.running)
        out = self.scheduler.schedule()
        failed = compiled + self._fail_unservable()
        self.last_step_ran = not out.is_empty
        if out.is_empty:
            return failed
        batch = self._batch(out, sample=True)
        result = self.executor.execute(batch)
        emitted, rejected = self.speculator.verify(out.chunks, batch.row_requests, result)
        self.scheduler.commit(out, rejected)
        now = time.monotonic()
        return failed + [self._postprocess(self._tracked[rid], tokens, now) for rid, tokens in emitted.items()]

    def build_batch(self, out: SchedulerOutput, all_logits: bool = False) -> ForwardBatch:
        """The `ForwardBatch` of a scheduled step, without sampling (tests and scoring run it with
        `executor.logits` and then `scheduler.commit(out)`). `all_logits`: every token's row."""
        return self._batch(out, sample=False, all_logits=all_logits)

    def _batch(self, out: SchedulerOutput, sample: bool, all_logits: bool = False) -> ForwardBatch:
        chunks, lora = self.lora.plan_step(out.chunks)
        rows = self._sample_rows(chunks) if sample else ()
        self.last_batch = build_forward_batch(chunks, self.blocks.tables, self.blocks.block_size, rows, lora,
                                              out.block_copies, all_logits)
        return self.last_batch

    def _sample_rows(self, chunks) -> list[SampleRow]:
        """One row per logits row: the completing chunks' last token, plus one per proposed token
        (with the draft's token and distribution when a draft model sampled it)."""
        tracked = [(self._tracked[c.request.request_id], c.num_spec) for c in chunks if c.completes]
        with_grammar = [t for t, _ in tracked if t.grammar is not None]
        masks = dict(zip(map(id, with_grammar), fill_bitmasks([t.grammar for t in with_grammar], self.vocab_size)))
        rows = []
        for t, k in tracked:
            r, p = t.request, t.request.params
            history = (tuple(r.prompt_token_ids), tuple(r.output_token_ids)) if p.has_penalties else ((), ())
            n = len(r.output_token_ids)
            q = self.speculator.draft_probs(r.request_id) if k else None
            for j in range(k + 1):
                draft = (r.spec_token_ids[j], q[j]) if q is not None and j < k else (None, None)
                rows.append(SampleRow(p, n + j, *history, block_eos=n + j < p.min_tokens,
                                      token_bitmask=masks.get(id(t)), draft_token=draft[0], draft_probs=draft[1]))
        return rows

    def _postprocess(self, t: _Tracked, tokens: list[tuple[int, object]], now: float) -> RequestOutput:
        """Append this step's tokens (several when speculation was accepted) until one ends the request."""
        r, p = t.request, t.request.params
        if r.times.first_token is None:
            r.times.first_token = now
        new_ids, text, logprobs = [], "", []
        reason, stop_reason = None, None
        for token, lp in tokens:
            r.output_token_ids.append(token)
            r.times.tokens.append(now)
            new_ids.append(token)
            if lp is not None:
                logprobs.append(TokenLogprob(token, lp[0], tuple(lp[1])))
            is_stop_id = (token in self.tokenizer.eos_token_ids and not p.ignore_eos) or token in p.stop_token_ids
            text += "" if is_stop_id else t.detok.add(token)
            if t.detok.stopped_by is not None:
                reason, stop_reason = FinishReason.STOP, t.detok.stopped_by
            elif is_stop_id:
                reason, stop_reason = FinishReason.STOP, token
            elif t.grammar is not None and (not t.grammar.accept(token) or t.grammar.is_terminated):
                reason = FinishReason.STOP  # the grammar is complete (or, never expected, refused the sampled token)
            elif len(r.output_token_ids) >= p.max_tokens or r.num_tokens >= self.max_model_len:
                reason = FinishReason.LENGTH
            if reason is not None:
                break
        self.lora.count_generated(r.adapter, len(new_ids))
        if reason is not None:
            text += t.detok.flush()
            self.scheduler.finish(r, reason)
            del self._tracked[r.request_id]
        return self._output(t, tuple(new_ids), text, tuple(logprobs), reason, stop_reason)

    def _output(self, t: _Tracked, new_ids, text, logprobs, reason=None, stop_reason=None) -> RequestOutput:
        r = t.request
        if r.status is RequestStatus.FINISHED and reason is None:
            reason = r.finish_reason
        return RequestOutput(
            request_id=r.request_id,
            new_token_ids=tuple(new_ids),
            new_text=text,
            finished=reason is not None,
            finish_reason=reason,
            num_prompt_tokens=r.num_prompt_tokens,
            num_cached_tokens=r.num_cached_tokens,
            num_output_tokens=len(r.output_token_ids),
            logprobs=logprobs,
            stop_reason=stop_reason,
            arrival_time=r.times.arrival,
            first_scheduled_time=r.times.first_scheduled,
            first_token_time=r.times.first_token,
            finish_time=r.times.finished,
            token_time=r.times.tokens[-1] if new_ids else None,
        )
