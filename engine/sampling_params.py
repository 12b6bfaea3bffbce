"""How one request wants its tokens chosen and when it stops. Validated once, then immutable.

Token ids (`stop_token_ids`, `logit_bias`) are checked against the vocabulary by `check_vocab`,
which the engine calls on every request it accepts: an id outside it is a ValueError naming the
field, never an index error in the sampler.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from llmop.engine.grammar.spec import GrammarSpec

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
LOGIT_BIAS_LIMIT = 100.0  # OpenAI's range; larger biases are clamped to it


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    min_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None  # None = off; N = the sampled token plus the top N alternatives
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias added to its logit), clamped to ±100
    grammar: GrammarSpec | None = None  # the output must match it (JSON schema, regex, choice, tool calls)
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        checks = [
            (self.max_tokens >= 1, "max_tokens must be at least 1"),
            (0 <= self.min_tokens <= self.max_tokens, "min_tokens must be between 0 and max_tokens"),
            (self.temperature >= 0.0, "temperature must be non-negative"),
            (0.0 < self.top_p <= 1.0, "top_p must be in (0, 1]"),
            (self.top_k >= 0, "top_k must be non-negative (0 disables it)"),
            (0.0 <= self.min_p <= 1.0, "min_p must be in [0, 1]"),
            (-2.0 <= self.presence_penalty <= 2.0, "presence_penalty must be in [-2, 2]"),
            (-2.0 <= self.frequency_penalty <= 2.0, "frequency_penalty must be in [-2, 2]"),
            (self.repetition_penalty > 0.0, "repetition_penalty must be positive"),
            (self.logprobs is None or 0 <= self.logprobs <= 20, "logprobs must be in [0, 20]"),
            (all(s for s in self.stop), "stop strings must be non-empty"),
            (self.top_k < 2**31, "top_k must be below 2**31"),
            # torch.Generator.manual_seed takes [-2**63, 2**64); n choices add their index to a seed.
            (self.seed is None or INT64_MIN <= self.seed < 2**64, "seed must fit in 64 bits"),
            (all(math.isfinite(b) for _, b in self.logit_bias), "logit_bias values must be finite"),
        ]
        for name in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
            checks.insert(0, (math.isfinite(getattr(self, name)), f"{name} must be a finite number"))
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        bias = tuple((int(t), max(-LOGIT_BIAS_LIMIT, min(LOGIT_BIAS_LIMIT, float(b)))) for t, b in self.logit_bias)
        object.__setattr__(self, "logit_bias", bias)

    def check_vocab(self, vocab_size: int) -> None:
        """Every token id this request names must be a row of the model's logits."""
        for name, ids in (("stop_token_ids", self.stop_token_ids), ("logit_bias", [t for t, _ in self.logit_bias])):
            bad = [t for t in ids if not 0 <= t < vocab_size]
            if bad:
                raise ValueError(f"{name} contains token id {bad[0]}, outside the vocabulary (0..{vocab_size - 1})")

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5 or self.top_k == 1

    @property
    def has_penalties(self) -> bool:
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.repetition_penalty != 1.0
