"""Weight-only int8 matmul: the Triton kernel (interpreter on the CPU) and the CPU fast path against
the torch reference, on irregular shapes; the per-channel quantizer's error bound."""

import pytest
import torch

from llmop.kernels.int8_matmul import int8_matmul, quantize_per_channel, ref_int8_matmul, triton_int8_matmul

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
TOL = {F32: (1e-4, 1e-5), F16: (1e-2, 2e-3), BF16: (5e-2, 1e-2)}


def _case(m, n, k, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen)
    w[min(1, n - 1)] = 0.0  # a zero row: scale 1, all-zero quants
    q, scale = quantize_per_channel(w)
    x = torch.randn(m, k, generator=gen).to(dtype)
    return x, w, q, scale


def test_quantizer_is_within_half_a_step_per_channel():
    x, w, q, scale = _case(1, 37, 53, F32, 0)
    assert q.dtype == torch.int8 and q.abs().max() <= 127
    err = (q.float() * scale[:, None] - w).abs()
    assert (err <= scale[:, None] / 2 + 1e-7).all()
    assert torch.equal(q[1], torch.zeros_like(q[1])) and scale[1] == 1.0


@pytest.mark.parametrize("m,n,k,dtype,block_m,block_n,block_k", [
    (1, 37, 53, F32, None, 16, 16),
    (3, 100, 64, BF16, 16, 32, 32),
    (17, 5, 96, F16, 16, 16, 32),
    (70, 65, 33, BF16, 64, 64, 16),
])
def test_triton_kernel_matches_reference(m, n, k, dtype, block_m, block_n, block_k, device):
    x, _, q, scale = _case(m, n, k, dtype, m + n)
    ref = ref_int8_matmul(x, q, scale.to(dtype))
    out = triton_int8_matmul(x.to(device), q.to(device), scale.to(dtype).to(device),
                             block_m=block_m, block_n=block_n, block_k=block_k)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.cpu().float(), ref.float(), atol=atol * k ** 0.5, rtol=rtol)


@pytest.mark.parametrize("m,k,dtype", [(1, 576, BF16), (5, 48, BF16), (40, 64, BF16), (3, 64, F32), (2, 40, BF16), (4, 33, F16)])
def test_cpu_path_matches_reference_including_odd_widths(m, k, dtype):
    """K = 40 and 33 must take the reference: torch's packed int8 mm is wrong or crashes there."""
    x, _, q, scale = _case(m, 29, k, dtype, k)
    out = int8_matmul(x, q, scale.to(dtype))
    ref = ref_int8_matmul(x, q, scale.to(dtype))
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.float(), ref.float(), atol=atol * k ** 0.5, rtol=rtol)
    batched = int8_matmul(x[None].expand(2, -1, -1), q, scale.to(dtype))
    assert batched.shape == (2, m, 29)
