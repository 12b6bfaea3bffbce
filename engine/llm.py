"""The offline interface: `LLM(model=...).generate(prompts, SamplingParams(...))`."""

from __future__ import annotations

import itertools
from typing import Sequence

from llmop.engine.config import EngineConfig
from llmop.engine.engine import LLMEngine
from llmop.engine.outputs import CompletionOutput
from llmop.engine.sampling_params import SamplingParams

Prompt = str | list[int]


class LLM:
    """Runs prompts to completion with continuous batching; all prompts share one engine."""

    def __init__(self, model: str | None = None, **config):
        self.engine = LLMEngine(EngineConfig(model=model, **config))
        self.tokenizer = self.engine.tokenizer
        self._ids = itertools.count()

    def generate(self, prompts: Prompt | Sequence[Prompt], params: SamplingParams | Sequence[SamplingParams] | None = None,
                 on_step=None) -> list[CompletionOutput]:
        """Token-id lists are used as given; strings are tokenized with special tokens added.
        `on_step(engine)` is called after each engine step (benchmarks read occupancy there)."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        params = params or SamplingParams()
        per_prompt = list(params) if isinstance(params, (list, tuple)) else [params] * len(prompts)
        order: list[str] = []
        texts: dict[str, list[str]] = {}
        tokens: dict[str, list[int]] = {}
        logprobs: dict[str, list] = {}
        prompt_ids: dict[str, list[int]] = {}
        reasons: dict[str, str] = {}
        for prompt, p in zip(prompts, per_prompt):
            rid = f"offline-{next(self._ids)}"
            ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
            self.engine.add_request(rid, ids, p)
            order.append(rid)
            prompt_ids[rid], texts[rid], tokens[rid], logprobs[rid] = ids, [], [], []
        while self.engine.has_unfinished():
            for out in self.engine.step():
                texts[out.request_id].append(out.new_text)
                tokens[out.request_id].extend(out.new_token_ids)
                logprobs[out.request_id].extend(out.logprobs)
                if out.finished:
                    reasons[out.request_id] = out.finish_reason or ""
            if on_step is not None:
                on_step(self.engine)
        return [
            CompletionOutput(rid, tuple(prompt_ids[rid]), tuple(tokens[rid]), "".join(texts[rid]),
                             reasons[rid], tuple(logprobs[rid]))
            for rid in order
        ]

    def chat(self, messages: list[dict], params: SamplingParams | None = None) -> CompletionOutput:
        ids = self.tokenizer.apply_chat_template(messages)
        return self.generate([ids], params)[0]
