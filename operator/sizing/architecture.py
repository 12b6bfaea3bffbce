"""The shape of a model and of an accelerator, in the units sizing needs (bytes, heads, tokens)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

DTYPE_BYTES: dict[str, float] = {
    "float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "int8": 1, "int4": 0.5,
}  # fmt: skip
FLOAT_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Architecture:
    """What sizing needs to know about a transformer (as in its config.json)."""

    parameters: int
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    dtype: str = "bfloat16"
    max_context_length: int | None = None
    # Optional (config.json): with them, sizing counts what the engine replicates on every rank and
    # refuses sizes the engine refuses.
    hidden_size: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    tie_word_embeddings: bool = False
    # The float dtype the model computes in (and keeps its embedding and KV cache in) when it is not
    # `dtype`'s: fp32 under fp16 weights (quantization fp16). None: `dtype` if a float, else bf16.
    activation_dtype: str | None = None

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights at the serving dtype."""
        return int(self.parameters * DTYPE_BYTES[self.dtype])

    def weight_bytes_per_gpu(self, t: int) -> int:
        """What one of t tensor-parallel ranks holds. The engine (engine/tp/shard.py) splits the
        decoder layers' linear weights t ways and replicates the norms, the embedding (both kept in
        the activations' float dtype even with int8 weights) and the LM head (at the serving dtype;
        a tied head is the embedding itself, or its int8 copy when the weights are int8); int8
        weights add their scales (`scale_bytes_per_gpu`); fp16 weights over fp32 activations count
        like int8's, at two bytes and without scales. Without the vocabulary and hidden sizes:
        all weights / t (at the activations' dtype when it is wider than the weights', since the
        embedding and norms are kept in it and their share is unknown)."""
        if self.vocab_size is None or self.hidden_size is None:
            widest = max(DTYPE_BYTES[self.dtype], DTYPE_BYTES[self.activation_dtype or self.dtype])
            return math.ceil(self.parameters * widest / t)
        table = self.vocab_size * self.hidden_size
        norms = (2 * self.layers + 1) * self.hidden_size  # two per decoder layer and the final one
        float_bytes = DTYPE_BYTES[self.kv_dtype("auto")]  # the float dtype the model computes in
        tied_float = self.tie_word_embeddings and DTYPE_BYTES[self.dtype] == float_bytes
        head = 0 if tied_float else table * DTYPE_BYTES[self.dtype]
        split = (self.parameters - table * (1 if self.tie_word_embeddings else 2) - norms) * DTYPE_BYTES[self.dtype]
        return int(math.ceil(split / t) + (table + norms) * float_bytes + head + self.scale_bytes_per_gpu(t))

    def scale_bytes_per_gpu(self, t: int) -> int:
        """Weight-only quantization (engine/quantization.py) keeps one scale per output channel of
        every linear layer, the LM head's included, in the float dtype. 0 for float weights, or
        without the sizes needed to count them."""
        float_dtype = self.kv_dtype("auto")
        if self.dtype in FLOAT_DTYPES or None in (self.hidden_size, self.intermediate_size, self.vocab_size):
            return 0
        kv_ranks = min(t, self.kv_heads)  # past the KV head count each rank keeps whole KV heads
        column = (self.attention_heads * self.head_dim / t + 2 * self.kv_heads * self.head_dim / kv_ranks
                  + 2 * self.intermediate_size / t)  # q, k, v, gate, up: split by output channel
        row = 2 * self.hidden_size  # o and down: split by input channel, so every rank has every output
        return int(math.ceil((self.layers * (column + row) + self.vocab_size) * DTYPE_BYTES[float_dtype]))

    def kv_dtype(self, requested: str = "auto") -> str:
        """The KV cache dtype: as requested, else the activations' (the weights' when they are floats)."""
        if requested != "auto":
            return requested
        return self.activation_dtype or (self.dtype if self.dtype in FLOAT_DTYPES else "bfloat16")

    def kv_bytes_per_token(self, kv_dtype: str = "auto") -> int:
        """K and V, every layer, every KV head: 2 × layers × kv_heads × head_dim × dtype bytes."""
        return int(2 * self.layers * self.kv_heads * self.head_dim * DTYPE_BYTES[self.kv_dtype(kv_dtype)])

    @classmethod
    def from_hf_config(cls, config: dict[str, Any], parameters: int, dtype: str | None = None) -> "Architecture":
        """From a Hugging Face config.json (the parameter count is not in it)."""
        heads = int(config["num_attention_heads"])
        return cls(
            parameters=parameters,
            layers=int(config["num_hidden_layers"]),
            attention_heads=heads,
            kv_heads=int(config.get("num_key_value_heads", heads)),
            head_dim=int(config.get("head_dim") or config["hidden_size"] // heads),
            dtype=dtype or str(config.get("torch_dtype", "bfloat16")),
            max_context_length=config.get("max_position_embeddings"),
            hidden_size=config.get("hidden_size"),
            intermediate_size=config.get("intermediate_size"),
            vocab_size=config.get("vocab_size"),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        )


@dataclass(frozen=True)
class Accelerator:
    """One GPU type as sizing sees it."""

    memory_bytes: int
    gpus_per_node: int = 8
    utilization: float = 0.9
    reserved_bytes: int = 2 * 2**30

    @property
    def usable_bytes(self) -> int:
        """utilization × memory: what weights, KV cache and the reserve may use on one GPU."""
        return int(self.utilization * self.memory_bytes)
