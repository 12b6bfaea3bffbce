"""The shape of a model and of an accelerator, in the units sizing needs (bytes, heads, tokens)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DTYPE_BYTES: dict[str, float] = {
    "float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "int8": 1, "int4": 0.5,
}  # fmt: skip


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

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights at the serving dtype."""
        return int(self.parameters * DTYPE_BYTES[self.dtype])

    def kv_dtype(self, requested: str = "auto") -> str:
        """The KV cache dtype: as requested, or the weights' dtype when that is a float type."""
        if requested != "auto":
            return requested
        return self.dtype if self.dtype in ("float32", "bfloat16", "float16") else "bfloat16"

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
