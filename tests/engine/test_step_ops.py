"""The decode step's small ops (issue 17) compute exactly what the formulas they replace compute.

RoPE with the sign folded into the sin table is bitwise equal to Hugging Face's rotate_half
formula (RMSNorm stays pinned to HF's steps); the CPU linear's layouts (one token through the
GEMV, 2-4 tokens as `(W x^T)^T`) equal `F.linear` to float rounding at every batch size around them.
"""

import pytest
import torch

from llmop.engine.model import RMSNorm
from llmop.engine.linear import linear
from llmop.engine.rope import apply_rope, cos_sin_table


def hf_rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def hf_rms_norm(weight, x, eps):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


@pytest.mark.parametrize("tokens,heads,head_dim", [(1, 9, 64), (5, 3, 64), (17, 4, 128), (2, 2, 32)])
def test_rope_equals_hf_rotate_half_bitwise(tokens, heads, head_dim):
    gen = torch.Generator().manual_seed(tokens * heads)
    inv = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)).float()
    cos, signed_sin = cos_sin_table(inv, 300)
    emb = torch.outer(torch.arange(300, dtype=torch.float32), inv)
    hf_cos, hf_sin = torch.cat([emb, emb], -1).cos(), torch.cat([emb, emb], -1).sin()
    assert torch.equal(cos, hf_cos)
    positions = torch.randint(0, 300, (tokens,), generator=gen)
    x = torch.randn(tokens, heads, head_dim, generator=gen)
    c, s = hf_cos[positions][:, None, :], hf_sin[positions][:, None, :]
    expected = x * c + hf_rotate_half(x) * s
    assert torch.equal(apply_rope(x, cos[positions], signed_sin[positions]), expected)


@pytest.mark.parametrize("tokens", [1, 16, 300])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_equals_hf_formula_bitwise(tokens, dtype):
    gen = torch.Generator().manual_seed(tokens)
    norm = RMSNorm(576, 1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(576, generator=gen))
    norm = norm.to(dtype)
    x = (torch.randn(tokens, 576, generator=gen) * 3).to(dtype)
    with torch.inference_mode():
        assert torch.equal(norm(x), hf_rms_norm(norm.weight, x, 1e-5))


@pytest.mark.parametrize("m", [0, 1, 2, 3, 4, 5, 8, 16, 64, 65, 130])
def test_linear_equals_f_linear_at_every_batch_size(m):
    gen = torch.Generator().manual_seed(m)
    w, b = torch.randn(96, 80, generator=gen), torch.randn(96, generator=gen)
    x = torch.randn(m, 80, generator=gen)
    for bias in (None, b):
        y = linear(x, w, bias)
        assert y.is_contiguous() and y.shape == (m, 96)
        torch.testing.assert_close(y, torch.nn.functional.linear(x, w, bias), rtol=1e-5, atol=1e-5)
