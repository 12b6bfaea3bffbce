"""The torch path's per-step LoRA plan against the reference shrink + expand."""

import pytest
import torch

from llmop.kernels.lora import lora_token_groups, ref_lora_expand, ref_lora_shrink
from llmop.kernels.lora_plan import HEAVY, apply_lora_plan, plan_lora

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
    expected = reference(y, x, a, b, scaling, slot, num_slots)
    got = apply_lora_plan(y.clone(), x, a, b.transpose(1, 2), plan)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    untouched = slot < 0
    assert torch.equal(got[untouched], y[untouched]), "rows without an adapter must not change"
    if mode == "prefill":  # segments of more than HEAVY tokens run alone, on contiguous rows
        assert plan.heavy and all(h.rows is None for h in plan.heavy)


def test_heavy_and_light_slots_together():
    """A prefill chunk on slot 0 (contiguous, heavy), a popular adapter's scattered decode rows on
    slot 1 (heavy), light slots 2, 3, 5 and base rows, over weights in the engine's layout (B
    rank-major and contiguous)."""
    x, a, b, scaling, _, y = make_case(40, 6, 16, 48, 56, torch.float32, "decode", seed=6)
    decode = [1, -1, 2, 1, 3, 1, 5, 1, -1, 1, 3, 1, 1, 2, 1, 1, 3, 1, 1]  # slot 1: 11 rows
    slot = torch.tensor([0] * 12 + decode + [-1] * 9, dtype=torch.int32)
    assert int((slot == 1).sum()) > HEAVY >= int((slot == 3).sum())
    plan = plan_lora(slot.tolist(), scaling.tolist(), torch.float32, "cpu")
    heavy = {h.slot: h for h in plan.heavy}
    assert set(heavy) == {0, 1} and heavy[0].rows is None and heavy[1].rows is not None
    assert (plan.lo, plan.hi) == (2, 6)
    got = apply_lora_plan(y.clone(), x, a, b.transpose(1, 2).contiguous(), plan)
    torch.testing.assert_close(got, reference(y, x, a, b, scaling, slot, 6), atol=1e-5, rtol=1e-5)
    assert torch.equal(got[slot < 0], y[slot < 0])


def test_plan_over_rank_sliced_weights():
    """The engine narrows the slots to the batch's largest rank: views, not copies."""
    x, a, b, scaling, slot, y = make_case(9, 4, 32, 48, 56, torch.float32, "decode", seed=3)
    a[:, 8:], b[:, :, 8:] = 0, 0
    plan = plan_lora(slot.tolist(), scaling.tolist(), torch.float32, "cpu")
    got = apply_lora_plan(y.clone(), x, a[:, :8], b.transpose(1, 2)[:, :8], plan)
    torch.testing.assert_close(got, reference(y, x, a, b, scaling, slot, 4), atol=1e-5, rtol=1e-5)


def test_sparse_slot_range_keeps_empty_slots_out():
    """Slots 2 and 5 in use: the plan spans 2..5, and the empty slots between add nothing."""
    x, a, b, scaling, _, y = make_case(6, 8, 8, 32, 24, torch.float32, "decode", seed=5)
    slot = torch.tensor([5, -1, 2, 5, 2, -1], dtype=torch.int32)
    plan = plan_lora(slot.tolist(), scaling.tolist(), torch.float32, "cpu")
    assert (plan.lo, plan.hi) == (2, 6) and plan.rows.shape == (4, 2)
    assert plan.scale[1:3].abs().sum() == 0
    got = apply_lora_plan(y.clone(), x, a, b.transpose(1, 2), plan)
    torch.testing.assert_close(got, reference(y, x, a, b, scaling, slot, 8), atol=1e-5, rtol=1e-5)


def test_no_plan_without_adapter_tokens():
    assert plan_lora([-1, -1, -1], [1.0] * 4, torch.float32, "cpu") is None
    only_heavy = plan_lora([0] * (HEAVY + 1), [1.0], torch.float32, "cpu")
    assert only_heavy.rows is None and len(only_heavy.heavy) == 1
