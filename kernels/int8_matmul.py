"""Weight-only int8 matmul: `y = (x Wq^T) * scale`, int8 weights with one scale per output channel.

- `int8_matmul_kernel` (Triton, CUDA): tiles of x in its own dtype (bf16/fp16/fp32) against int8
  weight tiles converted to x's dtype in registers, float32 accumulation, the channel scales applied
  once per output tile. The weights cross memory as int8: half of bf16's bytes.
- `ref_int8_matmul`: the torch reference (dequantize, float32 matmul).
- `int8_matmul`: what the engine calls: Triton on CUDA tensors; on the CPU, for a few rows (decode)
  `torch._weight_int8pack_mm` when `in_features % 16 == 0` (for 16-bit activations it returns garbage
  or crashes otherwise: seen with torch 2.15, K = 24 and 40 wrong, 33 a segfault), else the reference;
  for more rows (batched decode, prefill) the weight is dequantized to x's dtype for the float GEMM:
  the packed op's time grows by about one GEMV per row (on the 2-core Xeon measured for issue 17 it
  matched the bf16 GEMM at 8 rows and was 2.4x slower at 32), so int8 pays on the CPU for small
  batches only until a tiled int8 GEMM kernel exists.
"""

from __future__ import annotations

import torch

from ._triton import cdiv, check_launchable, dot_mode, jit, mma, next_pow2, tl

PACK_MM_MULTIPLE = 16
PACK_MM_MAX_ROWS = 8  # past this many rows the CPU dequantizes the weight and runs the float GEMM


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: `(q, scale)` with `weight ≈ q * scale[:, None]`, `scale = absmax / 127`
    (float32; rows of zeros get scale 1)."""
    w = weight.float()
    absmax = w.abs().amax(dim=1)
    scale = torch.where(absmax > 0, absmax / 127.0, torch.ones_like(absmax))
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q, scale


def check_int8_inputs(x, qweight, scale) -> None:
    if x.dim() != 2 or qweight.dim() != 2 or x.shape[1] != qweight.shape[1]:
        raise ValueError(f"x [M, K] and qweight [N, K] expected, got {tuple(x.shape)} and {tuple(qweight.shape)}")
    if qweight.dtype != torch.int8 or not qweight.is_contiguous():
        raise ValueError("qweight must be a contiguous int8 tensor")
    if scale.shape != (qweight.shape[0],):
        raise ValueError(f"scale must be [N] = [{qweight.shape[0]}], got {tuple(scale.shape)}")


def ref_int8_matmul(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Torch reference: `(x @ qweight^T) * scale` in float32, returned in x's dtype."""
    check_int8_inputs(x, qweight, scale)
    return (x.float() @ qweight.float().t() * scale.float()).to(x.dtype)


@jit
def int8_matmul_kernel(
    x_ptr, w_ptr, scale_ptr, out_ptr, M, N, K,
    stride_xm, stride_wn, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < M
    n_mask = offs_n < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        k_mask = k < K
        x = tl.load(x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm + k[None, :],
                    mask=m_mask[:, None] & k_mask[None, :], other=0.0)
        w = tl.load(w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn + k[None, :],
                    mask=n_mask[:, None] & k_mask[None, :], other=0)
        # int8 -> float32 -> x's dtype is exact (|q| <= 127); int8 -> bf16 directly gave NaN in the interpreter
        acc += mma(x, tl.trans(w.to(tl.float32).to(x.dtype)), DOT)
    scale = tl.load(scale_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)
    y = acc * scale[None, :]
    tl.store(out_ptr + offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :],
             y.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


def triton_int8_matmul(x, qweight, scale, *, block_m=None, block_n=64, block_k=64):
    """Triton: `(x @ qweight^T) * scale` in x's dtype. x `[M, K]` (last dim contiguous), qweight
    contiguous int8 `[N, K]`, scale `[N]`."""
    check_int8_inputs(x, qweight, scale)
    if x.stride(1) != 1:
        x = x.contiguous()
    check_launchable(x, qweight, scale)
    m, k = x.shape
    n = qweight.shape[0]
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return out
    if block_m is None:
        block_m = min(64, next_pow2(m, 16))
    int8_matmul_kernel[(cdiv(m, block_m), cdiv(n, block_n))](
        x, qweight, scale, out, m, n, k, x.stride(0), qweight.stride(0), out.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, DOT=dot_mode(x.dtype),
    )
    return out


def int8_matmul(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The engine's int8 linear: Triton on CUDA; on the CPU `torch._weight_int8pack_mm` where it is
    correct (see the module docstring), else the reference. x may have leading batch dims."""
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    if x2.is_cuda:
        y = triton_int8_matmul(x2, qweight, scale)
    elif x2.shape[0] > PACK_MM_MAX_ROWS:  # prefill: compute-bound, the float GEMM is far faster
        y = torch.nn.functional.linear(x2, qweight.to(x2.dtype)) * scale.to(x2.dtype)
    elif x2.shape[1] % PACK_MM_MULTIPLE == 0 and x2.shape[0] > 0:
        y = torch._weight_int8pack_mm(x2.contiguous(), qweight, scale.to(x2.dtype))
    else:
        y = ref_int8_matmul(x2, qweight, scale)
    return y.reshape(*lead, qweight.shape[0])
