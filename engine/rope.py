"""Rotary position embeddings: one cos/sin table per model, gathered by absolute position.

The HF "half-split" layout (rotate_half), with llama3 and linear frequency scaling.
"""

from __future__ import annotations

import math

import torch

from llmop.engine.model_config import ModelConfig


def inverse_frequencies(cfg: ModelConfig, rope_freqs: torch.Tensor | None = None) -> torch.Tensor:
    """Per-pair rotation frequencies, scaled as the config says. `rope_freqs` are GGUF's baked-in
    llama3 divisors, used instead of the scaling formula when the file carries them."""
    dim = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    if rope_freqs is not None:
        return (inv / rope_freqs.to(torch.float64)).float()
    rs = cfg.rope_scaling
    if rs is None:
        return inv.float()
    if rs.kind == "linear":
        return (inv / rs.factor).float()
    # llama3: long wavelengths slowed by `factor`, short ones kept, the band between interpolated.
    old = rs.original_max_position_embeddings
    low_wavelen, high_wavelen = old / rs.low_freq_factor, old / rs.high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / rs.factor, inv)
    smooth = (old / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor)
    smoothed = (1 - smooth) * scaled / rs.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled).float()


def cos_sin_table(inv_freq: torch.Tensor, max_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape [max_positions, head_dim] (each frequency repeated for both halves)."""
    t = torch.arange(max_positions, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [tokens, heads, head_dim]; cos/sin: [tokens, head_dim] already gathered by position."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]
