"""The architecture of a Llama-family model, read from a HF config.json or from GGUF metadata.

One frozen description serves the model code, the KV-cache sizing and the tokenizer set-up, whatever
format the weights came in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

# HF `architectures` entries this engine runs. Mistral and Qwen2 are Llama with small differences
# (Qwen2: q/k/v bias), which the fields below capture.
SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
}


class UnsupportedModelError(ValueError):
    """The checkpoint is not one this engine can run; the message says what is missing."""


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling. `kind` is "llama3" or "linear"."""

    kind: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool = False
    rope_scaling: RopeScaling | None = None
    sliding_window: int | None = None

    @property
    def gqa_ratio(self) -> int:
        return self.num_heads // self.num_kv_heads

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Bytes of K and V that one token occupies across all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes

    @classmethod
    def from_hf(cls, cfg: Mapping[str, Any]) -> "ModelConfig":
        archs = cfg.get("architectures") or []
        arch = next((SUPPORTED_ARCHITECTURES[a] for a in archs if a in SUPPORTED_ARCHITECTURES), None)
        if arch is None:
            raise UnsupportedModelError(
                f"architectures {archs} not supported; supported: {sorted(SUPPORTED_ARCHITECTURES)}"
            )
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
        return cls(
            architecture=arch,
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=float(cfg.get("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0))),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", arch == "qwen2")),
            rope_scaling=_rope_scaling_from_hf(cfg.get("rope_scaling") or cfg.get("rope_parameters")),
            sliding_window=int(window) if window else None,
        )

    @classmethod
    def from_gguf(cls, md: Mapping[str, Any], has_output_weight: bool) -> "ModelConfig":
        """From GGUF metadata (`{arch}.block_count`, …) as a plain dict of field → value."""
        arch = md["general.architecture"]
        if arch not in ("llama", "qwen2", "mistral"):
            raise UnsupportedModelError(f"GGUF architecture {arch!r} not supported (llama, qwen2, mistral)")
        p = f"{arch}."
        heads = int(md[p + "attention.head_count"])
        hidden = int(md[p + "embedding_length"])
        vocab = md.get(p + "vocab_size") or len(md["tokenizer.ggml.tokens"])
        scaling = None
        if md.get(p + "rope.scaling.type") == "linear":
            scaling = RopeScaling("linear", float(md[p + "rope.scaling.factor"]))
        return cls(
            architecture="qwen2" if arch == "qwen2" else "llama",
            vocab_size=int(vocab),
            hidden_size=hidden,
            intermediate_size=int(md[p + "feed_forward_length"]),
            num_layers=int(md[p + "block_count"]),
            num_heads=heads,
            num_kv_heads=int(md.get(p + "attention.head_count_kv") or heads),
            head_dim=int(md.get(p + "attention.key_length") or hidden // heads),
            rms_norm_eps=float(md[p + "attention.layer_norm_rms_epsilon"]),
            rope_theta=float(md.get(p + "rope.freq_base", 10000.0)),
            max_position_embeddings=int(md.get(p + "context_length", 2048)),
            tie_word_embeddings=not has_output_weight,
            attention_bias=arch == "qwen2",
            rope_scaling=scaling,
        )


def _rope_scaling_from_hf(rs: Mapping[str, Any] | None) -> RopeScaling | None:
    if not rs:
        return None
    kind = rs.get("rope_type") or rs.get("type")
    if kind in (None, "default"):
        return None
    if kind == "llama3":
        return RopeScaling(
            "llama3",
            float(rs["factor"]),
            float(rs.get("low_freq_factor", 1.0)),
            float(rs.get("high_freq_factor", 4.0)),
            int(rs.get("original_max_position_embeddings", 8192)),
        )
    if kind == "linear":
        return RopeScaling("linear", float(rs["factor"]))
    raise UnsupportedModelError(f"rope_scaling type {kind!r} not supported (llama3, linear)")
