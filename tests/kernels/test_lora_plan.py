"""The torch path's per-step LoRA plan against the reference shrink + expand."""

import pytest
import torch

from llmop.kernels.lora import lora_token_groups, ref_lora_expand, ref_lora_shrink
from llmop.kernels.lora_plan import MAX_WASTE, apply_lora_plan, plan_lora

from .test_lora import make_case

# (num_tokens, num_slots, max_rank, in_features, out_features, mode)
CASES = [
    (1, 3, 8, 64, 96, "decode"),
    (7, 4, 16, 96, 80, "decode"),
    (33, 16, 64, 128, 64, "decode"),
    (32, 16, 16, 72, 40, "decode"),
    (70, 3, 16, 64, 144, "prefill"),
    (40, 2, 64, 80, 64, "prefill"),
]


def reference(y, x, a, b, scaling, slot, num_slots):
    groups = lora_token_groups(slot, num_slots)
    h = ref_lora_shrink(x, a, slot, groups=groups)
    return ref_lora_expand(y.clone(), h, b, scaling, slot, groups=groups)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}tok-{c[1]}slots-r{c[2]}-{c[5]}" for c in CASES])
def test_plan_matches_reference(case):
    num_tokens, num_slots, max_rank, fin, fout, mode = case
    x, a, b, scaling, slot, y = make_case(num_tokens, num_slots, max_rank, fin, fout, torch.float32,
                                          mode, seed=num_tokens * 7 + num_slots)
    plan = plan_lora(slot.tolist(), scaling.tolist(), torch.float32, "cpu")
    if plan is None:  # the padding budget refused it: that must be because of waste
        used = slot[slot >= 0]
        group = int(torch.bincount(used).max())
        assert (int(used.max()) - int(used.min()) + 1) * group > MAX_WASTE * used.numel()
        return
    expected = reference(y, x, a, b, scaling, slot, num_slots)
    got = apply_lora_plan(y.clone(), x, a, b, plan)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    untouched = slot < 0
    assert torch.equal(got[untouched], y[untouched]), "rows without an adapter must not change"


def test_plan_over_rank_sliced_weights():
    """The engine narrows the slots to the batch's largest rank: views, not copies."""
    x, a, b, scaling, slot, y = make_case(9, 4, 32, 48, 56, torch.float32, "decode", seed=3)
    a[:, 8:], b[:, :, 8:] = 0, 0
    plan = plan_lora(slot.tolist(), scaling.tolist(), torch.float32, "cpu")
    got = apply_lora_plan(y.clone(), x, a[:, :8], b[:, :, :8], plan)
    torch.testing.assert_close(got, reference(y, x, a, b, scaling, slot, 4), atol=1e-5, rtol=1e-5)


def test_sparse_slot_range_keeps_empty_slots_out():
    """Slots 2 and 5 in use: the plan spans 2..5, and the empty slots between add nothing."""
    x, a, b, scaling, _, y = make_case(6, 8, 8, 32, 24, torch.float32, "decode", seed=5)
    slot = torch.tensor([5, -1, 2, 5, 2, -1], dtype=torch.int32)
    plan = plan_lora(slot.tolist(), scaling.tolist(), torch.float32, "cpu")
    assert (plan.lo, plan.hi) == (2, 6) and plan.rows.shape == (4, 2)
    assert plan.scale[1:3].abs().sum() == 0
    got = apply_lora_plan(y.clone(), x, a, b, plan)
    torch.testing.assert_close(got, reference(y, x, a, b, scaling, slot, 8), atol=1e-5, rtol=1e-5)


def test_no_plan_without_adapter_tokens_or_when_padding_would_dominate():
    assert plan_lora([-1, -1, -1], [1.0] * 4, torch.float32, "cpu") is None
    # a 64-token prefill on slot 0 beside one decode row on slot 15: 16 x 64 padded rows for 65 tokens
    long_prefill = [0] * 64 + [15]
    assert plan_lora(long_prefill, [1.0] * 16, torch.float32, "cpu") is None
    assert plan_lora([0] * 64 + [1], [1.0] * 16, torch.float32, "cpu") is not None
