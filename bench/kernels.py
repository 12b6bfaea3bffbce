"""GPU benchmark of the llmop kernels: Triton vs the torch reference vs the memory roofline.

Each op is timed with CUDA events (median of repeated calls after warm-up).  The roofline is the
bytes the op must move (read once, write once) over the device's copy bandwidth measured here with
a large device-to-device copy, so "% roofline" is directly comparable across GPUs.  Issue bars
(H100/H200): decode attention >= 70% of measured bandwidth at 32 sequences x 4K context; LoRA
shrink+expand adds <= 10% to the linear layers of an 8B-sized decoder layer with 16 adapters.

    python bench/kernels.py            # prints a table; exits 0 with a message when there is no CUDA
"""

from __future__ import annotations

import sys

import torch


def cuda_ms(fn, warmup=5, iters=25) -> float:
    """Median milliseconds of `fn()` measured with CUDA events."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def copy_bandwidth() -> float:
    """Bytes/s of a 1 GiB device-to-device copy (read + write counted)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = cuda_ms(lambda: dst.copy_(src), warmup=3, iters=10)
    return 2 * src.numel() / (ms * 1e-3)


def nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def paged_inputs(num_seqs, ctx, q_len, kv_heads=8, gqa=4, head_dim=128, block_size=16, dtype=torch.bfloat16):
    """A shuffled paged cache holding `num_seqs` contexts of `ctx` tokens, `q_len` new per sequence."""
    blocks = -(-ctx // block_size)
    num_blocks = num_seqs * blocks
    kc = torch.randn(num_blocks, block_size, kv_heads, head_dim, dtype=dtype, device="cuda")
    vc = torch.randn_like(kc)
    bt = torch.randperm(num_blocks, device="cuda").view(num_seqs, blocks).int()
    sl = torch.full((num_seqs,), ctx, dtype=torch.int32, device="cuda")
    qsl = torch.arange(num_seqs + 1, dtype=torch.int32, device="cuda") * q_len
    q = torch.randn(num_seqs * q_len, kv_heads * gqa, head_dim, dtype=dtype, device="cuda")
    return q, kc, vc, bt, sl, qsl


def bench_attention(rows, bw):
    from llmop.kernels.paged_attention_decode import paged_attention_decode, ref_paged_attention_decode
    from llmop.kernels.paged_attention_prefill import paged_attention_prefill, ref_paged_attention_prefill
    from llmop.kernels.reshape_and_cache import ref_reshape_and_cache, reshape_and_cache

    for num_seqs, ctx in ((32, 4096), (1, 32768), (128, 1024)):
        q, kc, vc, bt, sl, _ = paged_inputs(num_seqs, ctx, 1)
        args = (q, kc, vc, bt, sl)
        torch.testing.assert_close(paged_attention_decode(*args), ref_paged_attention_decode(*args, max_seq_len=ctx), atol=3e-2, rtol=3e-2)
        moved = nbytes(kc, vc) + 2 * nbytes(q)  # every context token's K and V once, q in, out
        t = cuda_ms(lambda: paged_attention_decode(*args))
        rows.append(("decode attention", f"{num_seqs} seqs x {ctx}", t,
                     cuda_ms(lambda: ref_paged_attention_decode(*args, max_seq_len=ctx), iters=5), moved, bw))
        if (num_seqs, ctx) == (32, 4096):
            share = moved / bw * 1e3 / t
            print(f"decode attention, 32 seqs x 4K: {100 * share:.0f}% of the measured bandwidth "
                  f"(bar >= 70%: {'met' if share >= 0.7 else 'NOT met'})")
        del kc, vc

    for num_seqs, ctx, q_len in ((4, 2048, 2048), (8, 4096, 512)):
        q, kc, vc, bt, sl, qsl = paged_inputs(num_seqs, ctx, q_len)
        args = (q, kc, vc, bt, sl, qsl)
        moved = nbytes(kc, vc) + 2 * nbytes(q)
        rows.append(("prefill attention", f"{num_seqs} x {q_len} new / {ctx}", cuda_ms(lambda: paged_attention_prefill(*args)),
                     cuda_ms(lambda: ref_paged_attention_prefill(*args), iters=3), moved, bw))

    q, kc, vc, bt, sl, _ = paged_inputs(64, 4096, 1)
    key = torch.randn(4096, 8, 128, dtype=kc.dtype, device="cuda")
    slots = torch.randperm(kc.shape[0] * kc.shape[1], device="cuda")[:4096]
    rows.append(("reshape_and_cache", "4096 tokens", cuda_ms(lambda: reshape_and_cache(key, key, kc, vc, slots)),
                 cuda_ms(lambda: ref_reshape_and_cache(key, key, kc, vc, slots)), 4 * nbytes(key), bw))


def bench_lora(rows, bw):
    """Decode step of an 8B-sized layer (Llama 3 8B shapes), 16 adapters of rank 16, 64 tokens."""
    from llmop.kernels.lora import lora_expand, lora_shrink, lora_token_groups, ref_lora_expand, ref_lora_shrink

    tokens, slots, rank, dtype = 64, 16, 16, torch.bfloat16
    projections = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096)}
    base_ms = lora_ms = 0.0
    for name, (fin, fout) in projections.items():
        x = torch.randn(tokens, fin, dtype=dtype, device="cuda")
        w = torch.randn(fout, fin, dtype=dtype, device="cuda") / fin**0.5
        a = torch.randn(slots, rank, fin, dtype=dtype, device="cuda") / fin**0.5
        b = torch.randn(slots, fout, rank, dtype=dtype, device="cuda") / rank**0.5
        scaling = torch.ones(slots, device="cuda")
        token_slot = torch.randint(-1, slots, (tokens,), dtype=torch.int32, device="cuda")
        groups = lora_token_groups(token_slot, slots)
        y = x @ w.T
        h = torch.empty(tokens, rank, device="cuda")

        def triton_lora():
            lora_expand(y, lora_shrink(x, a, token_slot, out=h, groups=groups), b, scaling, token_slot, groups=groups)

        def torch_lora():
            ref_lora_expand(y, ref_lora_shrink(x, a, token_slot, out=h, groups=groups), b, scaling, token_slot, groups=groups)

        expect = y.clone()
        ref_lora_expand(expect, ref_lora_shrink(x, a, token_slot, groups=groups), b, scaling, token_slot, groups=groups)
        got = y.clone()
        lora_expand(got, lora_shrink(x, a, token_slot, out=h, groups=groups), b, scaling, token_slot, groups=groups)
        torch.testing.assert_close(got.float(), expect.float(), atol=3e-2, rtol=3e-2)
        t = cuda_ms(triton_lora)
        base_ms += cuda_ms(lambda: torch.matmul(x, w.T, out=y))
        lora_ms += t
        rows.append((f"lora shrink+expand {name}", f"{tokens} tok, {slots} x r{rank}", t, cuda_ms(torch_lora, iters=5),
                     nbytes(x, a, b, h, h) + 2 * nbytes(y), bw))
    print(f"LoRA on the linear layers of one 8B-sized decoder layer: base {base_ms:.3f} ms, "
          f"LoRA adds {lora_ms:.3f} ms = {100 * lora_ms / base_ms:.1f}% "
          f"(bar <= 10%: {'met' if lora_ms <= 0.1 * base_ms else 'NOT met'})")


def main() -> int:
    if not torch.cuda.is_available():
        print("bench/kernels.py needs a CUDA GPU; none found, nothing measured.")
        return 0
    bw = copy_bandwidth()
    print(f"device: {torch.cuda.get_device_name()}, measured copy bandwidth {bw / 1e9:.0f} GB/s")
    rows: list[tuple] = []
    bench_attention(rows, bw)
    bench_lora(rows, bw)
    print("\n| op | case | triton ms | torch ms | speed-up | roofline ms | % of roofline |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for op, case, t_ms, ref_ms, moved, bandwidth in rows:
        roof = moved / bandwidth * 1e3
        print(f"| {op} | {case} | {t_ms:.3f} | {ref_ms:.3f} | {ref_ms / t_ms:.1f}x | {roof:.3f} | {100 * roof / t_ms:.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
