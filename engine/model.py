"""A Llama-family decoder in plain single-device PyTorch (GQA, RoPE, RMSNorm, SwiGLU).

It runs one flattened batch of tokens from many sequences; attention goes through the backend
interface over the paged KV cache. Parameter names match Hugging Face's, so a HF state dict loads
as is. LoRA and tensor parallelism are applied as passes that replace its linear layers.
"""

from __future__ import annotations

import torch
from torch import nn

from llmop.engine.attention import AttentionBackend, AttentionMetadata
from llmop.engine.linear import Linear
from llmop.engine.model_config import ModelConfig
from llmop.engine.rope import apply_rope, cos_sin_table, inverse_frequencies


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.scale = self.head_dim**-0.5
        h, bias = cfg.hidden_size, cfg.attention_bias
        self.q_proj = Linear(h, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = Linear(h, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = Linear(h, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = Linear(self.num_heads * self.head_dim, h, bias=False)

    def forward(self, x, cos, sin, kv_cache, meta: AttentionMetadata, backend: AttentionBackend):
        t = x.shape[0]
        q = apply_rope(self.q_proj(x).view(t, self.num_heads, self.head_dim), cos, sin)
        k = apply_rope(self.k_proj(x).view(t, self.num_kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(t, self.num_kv_heads, self.head_dim)
        o = backend.forward(q, k, v, kv_cache, meta, self.scale)
        return self.o_proj(o.reshape(t, self.num_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, kv_cache, meta, backend):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, kv_cache, meta, backend)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    """`model.*` in HF naming: embeddings, layers, final norm."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig, max_positions: int, rope_freqs: torch.Tensor | None = None):
        super().__init__()
        self.config = cfg
        self.model = LlamaBody(cfg)
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        cos, sin = cos_sin_table(inverse_frequencies(cfg, rope_freqs), max_positions)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
        backend: AttentionBackend,
    ) -> torch.Tensor:
        """Hidden states [num_tokens, hidden] after the final norm."""
        x = self.model.embed_tokens(input_ids)
        cos = self.rope_cos[positions].to(x.dtype)
        sin = self.rope_sin[positions].to(x.dtype)
        for layer, cache in zip(self.model.layers, kv_caches):
            x = layer(x, cos, sin, cache, meta, backend)
        return self.model.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


def build_model(cfg: ModelConfig, state_dict: dict[str, torch.Tensor], dtype: torch.dtype,
                device: torch.device, max_positions: int) -> LlamaForCausalLM:
    """Instantiate without initialising weights, then load the checkpoint's."""
    rope_freqs = state_dict.pop("rope_freqs", None)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg, max_positions, rope_freqs)
    if cfg.tie_word_embeddings:
        state_dict.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict(state_dict, strict=False, assign=True)
    missing = [m for m in missing if not (cfg.tie_word_embeddings and m == "lm_head.weight")]
    unexpected = [u for u in unexpected if "rotary_emb" not in u]
    if missing or unexpected:
        raise ValueError(f"checkpoint does not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    cos, sin = cos_sin_table(inverse_frequencies(cfg, rope_freqs), max_positions)
    model.rope_cos, model.rope_sin = cos, sin
    return model.to(device=device, dtype=dtype).eval()
