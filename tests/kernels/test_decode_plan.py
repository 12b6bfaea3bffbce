"""The torch decode plan: buckets bound the padding, and one plan serves every layer of a step."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from llmop.kernels.decode_plan import GROWTH, length_buckets, plan_decode
from llmop.kernels.paged_attention_decode import ref_paged_attention_decode
from llmop.kernels.paged_attention_prefill import ref_paged_attention_prefill


@given(st.lists(st.integers(0, 5000), max_size=80))
def test_buckets_cover_every_nonempty_row_once_with_bounded_padding(lengths):
    groups = length_buckets(lengths)
    flat = [i for g in groups for i in g]
    assert sorted(flat) == [i for i, n in enumerate(lengths) if n > 0]
    for g in groups:
        assert max(lengths[i] for i in g) <= GROWTH * min(lengths[i] for i in g)


def test_one_plan_serves_several_layers(paged_case, seq_lens_for):
    """The plan depends on block tables and lengths only: reused on another layer's cache it gives
    what a fresh call gives, NaN-poisoned stale slots included."""
    lens = seq_lens_for(11, 16, seed=21) + [3, 400]
    a = paged_case(lens, [1] * len(lens), 3, 3, 64, 16, torch.float32, "cpu", seed=1)
    b = paged_case(lens, [1] * len(lens), 3, 3, 64, 16, torch.float32, "cpu", seed=2)
    b.block_tables, b.key_cache, b.value_cache = a.block_tables, a.key_cache.clone(), a.value_cache.clone()
    b.key_cache.normal_()  # another layer: same tables, other contents (no NaN left to hide bugs)
    plan = plan_decode(a.key_cache, a.block_tables, a.seq_lens)
    assert len(plan.buckets) > 1
    for c in (a, b):
        args = (c.query, c.key_cache, c.value_cache, c.block_tables, c.seq_lens)
        torch.testing.assert_close(ref_paged_attention_decode(*args, plan=plan), ref_paged_attention_decode(*args))
    torch.testing.assert_close(ref_paged_attention_decode(a.query, a.key_cache, a.value_cache, a.block_tables,
                                                          a.seq_lens, plan=plan), a.dense(), atol=1e-5, rtol=1e-5)


def test_mixed_batch_plan_covers_only_the_decode_rows(paged_case):
    c = paged_case([40, 7, 1, 90, 33], [40, 1, 1, 5, 1], 2, 3, 64, 16, torch.float32, "cpu", seed=3)
    plan = plan_decode(c.key_cache, c.block_tables, c.seq_lens, c.query_start_loc)
    assert sorted(int(t) for b in plan.buckets for t in b.tokens) == [40, 41, 47]
    args = (c.query, c.key_cache, c.value_cache, c.block_tables, c.seq_lens, c.query_start_loc)
    torch.testing.assert_close(ref_paged_attention_prefill(*args, plan=plan), c.dense(), atol=1e-5, rtol=1e-5)


def test_a_plan_for_another_cache_is_refused(paged_case):
    c = paged_case([20, 5], [1, 1], 2, 1, 64, 16, torch.float32, "cpu", seed=4)
    plan = plan_decode(c.key_cache, c.block_tables, c.seq_lens)
    other = c.key_cache.to(torch.bfloat16)
    with pytest.raises(ValueError, match="another shape or dtype"):
        ref_paged_attention_decode(c.query.to(torch.bfloat16), other, other, c.block_tables, c.seq_lens, plan=plan)
