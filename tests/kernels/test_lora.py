"""Batched LoRA shrink/expand: kernels against references, references against per-token math."""

import pytest
import torch

from llmop.kernels.lora import lora_expand, lora_shrink, lora_token_groups, ref_lora_expand, ref_lora_shrink

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
# (atol, rtol): shrink outputs float32 from exact products (only the summation order differs);
# expand rounds y to its dtype, so a unit in the last place of the output dtype.
SHRINK_TOL = {F32: (1e-5, 1e-5), F16: (1e-4, 1e-4), BF16: (1e-4, 1e-4)}
EXPAND_TOL = {F32: (1e-5, 1e-5), F16: (2e-3, 2e-3), BF16: (1.6e-2, 1.6e-2)}


def make_case(num_tokens, num_slots, max_rank, in_features, out_features, dtype, mode, seed):
    """Adapters of ranks up to max_rank (zero-padded) and tokens using them; mode "decode" mixes
    slots row by row, "prefill" gives contiguous segments (some without an adapter)."""
    gen = torch.Generator().manual_seed(seed)
    ranks = [max_rank] + torch.randint(1, max_rank + 1, (num_slots - 1,), generator=gen).tolist()
    a = torch.zeros(num_slots, max_rank, in_features)
    b = torch.zeros(num_slots, out_features, max_rank)
    for s, r in enumerate(ranks):
        a[s, :r] = torch.randn(r, in_features, generator=gen) / in_features**0.5
        b[s, :, :r] = torch.randn(out_features, r, generator=gen) / r**0.5
    if mode == "decode":
        slot = torch.randint(-1, num_slots, (num_tokens,), generator=gen)
        slot[0] = 0  # at least one row with an adapter, and (given two rows) one without
        if num_tokens > 1:
            slot[-1] = -1
    else:
        cuts = sorted(torch.randperm(num_tokens - 1, generator=gen)[:3].add(1).tolist())
        bounds = [0, *cuts, num_tokens]
        slot = torch.empty(num_tokens, dtype=torch.long)
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            slot[lo:hi] = -1 if i == 1 else int(torch.randint(0, num_slots, (1,), generator=gen))
    x = torch.randn(num_tokens, in_features, generator=gen).to(dtype)
    y = torch.randn(num_tokens, out_features, generator=gen).to(dtype)
    scaling = torch.rand(num_slots, generator=gen) + 0.5
    return x, a.to(dtype), b.to(dtype), scaling, slot.to(torch.int32), y


# (num_tokens, num_slots, max_rank, in_features, out_features, dtype, mode)
CASES = [
    (1, 3, 8, 64, 96, F32, "decode"),
    (7, 4, 16, 96, 80, BF16, "decode"),
    (33, 16, 64, 128, 64, F16, "decode"),
    (33, 5, 8, 200, 72, F32, "decode"),
    (70, 3, 16, 64, 144, BF16, "prefill"),
    (40, 2, 64, 80, 64, F32, "prefill"),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}tok-r{c[2]}-{str(c[5])[6:]}-{c[6]}" for c in CASES])
def test_kernels_match_references(case, device):
    num_tokens, num_slots, max_rank, fin, fout, dtype, mode = case
    x, a, b, scaling, slot, y = (t.to(device) for t in make_case(*case, seed=num_tokens + max_rank))
    groups = lora_token_groups(slot, num_slots)
    has = slot >= 0
    assert has.any() and (num_tokens == 1 or not has.all())

    poison = torch.full((num_tokens, max_rank), float("nan"), device=device)
    h = lora_shrink(x, a, slot, out=poison.clone(), groups=groups)
    h_ref = ref_lora_shrink(x, a, slot, out=poison.clone())
    atol, rtol = SHRINK_TOL[dtype]
    torch.testing.assert_close(h[has], h_ref[has], atol=atol, rtol=rtol)
    assert h[~has].isnan().all(), "rows without an adapter must not be touched"

    out = lora_expand(y.clone(), h_ref, b, scaling, slot, groups=groups)
    out_ref = ref_lora_expand(y.clone(), h_ref, b, scaling, slot)
    atol, rtol = EXPAND_TOL[dtype]
    torch.testing.assert_close(out.float(), out_ref.float(), atol=atol, rtol=rtol)
    assert torch.equal(out[~has], y[~has]), "rows without an adapter must be left exactly as they were"


def test_expand_into_a_column_slice():
    """y may be a slice of a fused output (q/k/v projections share one buffer)."""
    x, a, b, scaling, slot, _ = make_case(9, 3, 16, 64, 48, F32, "decode", seed=1)
    fused = torch.randn(9, 3 * 48)
    expect = fused.clone()
    ref_lora_expand(expect[:, 48:96], ref_lora_shrink(x, a, slot), b, scaling, slot)
    lora_expand(fused[:, 48:96], lora_shrink(x, a, slot), b, scaling, slot)
    torch.testing.assert_close(fused, expect, atol=1e-5, rtol=1e-5)
    assert torch.equal(fused[:, :48], expect[:, :48]) and torch.equal(fused[:, 96:], expect[:, 96:])


@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_references_match_per_token_math(mode):
    x, a, b, scaling, slot, y = make_case(30, 4, 16, 48, 40, F32, mode, seed=2)
    h = ref_lora_shrink(x, a, slot, out=torch.zeros(30, 16))
    out = ref_lora_expand(y.clone(), h, b, scaling, slot)
    for t, s in enumerate(slot.tolist()):
        want = y[t] if s < 0 else y[t] + scaling[s] * (b[s] @ (a[s] @ x[t]))
        torch.testing.assert_close(out[t], want, atol=1e-5, rtol=1e-5)


def test_token_groups_are_stable_segments():
    slot = torch.tensor([2, 2, -1, 0, 2, 1, 1, -1], dtype=torch.int32)
    g = lora_token_groups(slot, 4)
    assert g.bounds.tolist() == [2, 3, 5, 8, 8]
    assert g.order.tolist() == [2, 7, 3, 5, 6, 0, 1, 4]


def test_rank_sliced_weight_views(device):
    """A batch whose adapters all have rank <= r may pass `lora_a[:, :r]` / `lora_b[..., :r]`."""
    x, a, b, scaling, slot, y = (t.to(device) for t in make_case(12, 3, 64, 64, 48, F32, "decode", seed=3))
    a[:, 8:] = 0
    b[..., 8:] = 0
    h_full = ref_lora_shrink(x, a, slot, out=torch.zeros(12, 64, device=device))
    h = lora_shrink(x, a[:, :8], slot, out=torch.zeros(12, 8, device=device))
    torch.testing.assert_close(h, h_full[:, :8], atol=1e-5, rtol=1e-5)
    out = lora_expand(y.clone(), h, b[..., :8], scaling, slot)
    torch.testing.assert_close(out, ref_lora_expand(y.clone(), h_full, b, scaling, slot), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("rank", [16, 8])
def test_expand_reads_a_rank_major_buffer(device, rank):
    """The engine stores B rank-major (`[slots, rank, out]`) and passes a transposed view, rank-sliced
    when the batch allows: the kernel must follow B's strides, not assume a unit stride in rank."""
    x, a, b, scaling, slot, y = (t.to(device) for t in make_case(21, 4, 16, 64, 80, F32, "decode", seed=4))
    a[:, rank:], b[..., rank:] = 0, 0
    b_t = b.transpose(1, 2).contiguous()  # [slots, rank, out], as in the engine's LoRA layers
    view = b_t[:, :rank].transpose(1, 2)
    assert view.stride(2) != 1
    h = ref_lora_shrink(x, a[:, :rank], slot, out=torch.zeros(21, rank, device=device))
    want = ref_lora_expand(y.clone(), h, b[..., :rank].contiguous(), scaling, slot)
    torch.testing.assert_close(lora_expand(y.clone(), h, view, scaling, slot), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ref_lora_expand(y.clone(), h, view, scaling, slot), want, atol=1e-5, rtol=1e-5)
