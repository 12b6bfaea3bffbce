"""Write the new tokens' keys and values into the paged KV cache.

The cache of one layer is `[num_blocks, block_size, num_kv_heads, head_dim]` for keys and the same
for values; a token's slot is `block_id * block_size + offset_in_block`, given per token by
`slot_mapping` (-1 = padding, skipped).  One program copies one token's `[num_kv_heads, head_dim]`
row of keys and of values, casting to the cache dtype.

An fp8 (e4m3) cache stores `value / scale`, saturated to e4m3's range (±448), with one scale per
cache tensor (`k_scale`, `v_scale`); the attention ops multiply it back. Other dtypes ignore the
scales. The scale-and-round is one torch op before the copy kernel on every device: Triton's
interpreter rounds fp32 to e4m3 wrongly (125.7 became 64 where round-to-nearest-even gives 128),
so a conversion inside the kernel could not be tested on the CPU.
"""

from __future__ import annotations

import torch

from ._triton import check_launchable, jit, next_pow2, tl

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # the largest finite e4m3 value


def to_cache(x: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor:
    """What the cache stores for `x` (torch): fp8 as `x / scale` saturated, others a plain cast."""
    if dtype == FP8:
        return (x.float() * (1.0 / scale)).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return x.to(dtype)


def check_cache_inputs(key, value, key_cache, value_cache, slot_mapping) -> None:
    """Validate shapes, dtypes and layouts shared by the kernel and the reference."""
    if key.dim() != 3 or key.shape != value.shape:
        raise ValueError(f"key/value must be [num_tokens, num_kv_heads, head_dim], got {key.shape}, {value.shape}")
    if key_cache.dim() != 4 or key_cache.shape != value_cache.shape:
        raise ValueError(f"caches must be [num_blocks, block_size, num_kv_heads, head_dim], got {key_cache.shape}")
    if key_cache.dtype != value_cache.dtype:
        raise ValueError("key_cache and value_cache must share a dtype")
    if tuple(key.shape[1:]) != tuple(key_cache.shape[2:]):
        raise ValueError(f"key heads/dim {tuple(key.shape[1:])} do not match the cache {tuple(key_cache.shape[2:])}")
    if slot_mapping.shape != (key.shape[0],) or slot_mapping.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"slot_mapping must be int32/int64 [num_tokens], got {slot_mapping.dtype} {slot_mapping.shape}")
    if not (key_cache.is_contiguous() and value_cache.is_contiguous()):
        raise ValueError("caches must be contiguous")


@jit
def reshape_and_cache_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, slot_mapping_ptr,
    stride_kt, stride_kh, stride_vt, stride_vh,
    NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
):
    tok = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + tok).to(tl.int64)
    if slot < 0:
        return
    offs = tl.arange(0, BLOCK)  # one token's NUM_HEADS * HEAD_DIM elements, flattened
    mask = offs < NUM_HEADS * HEAD_DIM
    head = offs // HEAD_DIM
    dim = offs % HEAD_DIM
    k = tl.load(key_ptr + tok.to(tl.int64) * stride_kt + head * stride_kh + dim, mask=mask)
    v = tl.load(value_ptr + tok.to(tl.int64) * stride_vt + head * stride_vh + dim, mask=mask)
    dst = slot * (NUM_HEADS * HEAD_DIM) + offs
    tl.store(key_cache_ptr + dst, k.to(key_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(value_cache_ptr + dst, v.to(value_cache_ptr.dtype.element_ty), mask=mask)


def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scale=1.0, v_scale=1.0) -> None:
    """Triton: `key_cache.view(-1, H, D)[slot] = key[token]` for every token with slot >= 0.

    key/value: `[num_tokens, num_kv_heads, head_dim]` (any row stride, last dim contiguous);
    caches: contiguous `[num_blocks, block_size, num_kv_heads, head_dim]`; slot_mapping int32/int64;
    k_scale/v_scale: the fp8 caches' scales (see the module docstring).
    """
    check_cache_inputs(key, value, key_cache, value_cache, slot_mapping)
    check_launchable(key, value, key_cache, value_cache, slot_mapping)
    if key.stride(2) != 1 or value.stride(2) != 1:
        raise ValueError("key/value must be contiguous in head_dim")
    num_tokens, num_heads, head_dim = key.shape
    if num_tokens == 0:
        return
    if key_cache.dtype == FP8:
        key, value = to_cache(key, FP8, k_scale), to_cache(value, FP8, v_scale)
    reshape_and_cache_kernel[(num_tokens,)](
        key, value, key_cache, value_cache, slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        NUM_HEADS=num_heads, HEAD_DIM=head_dim, BLOCK=next_pow2(num_heads * head_dim, 16),
    )


def ref_reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scale=1.0, v_scale=1.0) -> None:
    """Torch reference of `reshape_and_cache` (same arguments, same effect)."""
    check_cache_inputs(key, value, key_cache, value_cache, slot_mapping)
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    num_heads, head_dim = key.shape[1:]
    key_cache.view(-1, num_heads, head_dim)[slots] = to_cache(key[keep], key_cache.dtype, k_scale)
    value_cache.view(-1, num_heads, head_dim)[slots] = to_cache(value[keep], value_cache.dtype, v_scale)
