"""The sampler's grammar mask: `apply_token_bitmask` against a plain Python reference and against
xgrammar's own kernel, on random irregular shapes (vocab not a multiple of 32, a subset of rows,
words with bit 31 set)."""

import random

import pytest
import torch

from llmop.engine.sampler import apply_token_bitmask, unpack_bitmask


def reference(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> torch.Tensor:
    out = logits.clone()
    for j, r in enumerate(rows):
        for t in range(logits.shape[1]):
            word = int(bitmask[j, t // 32]) & 0xFFFFFFFF
            if not (word >> (t % 32)) & 1:
                out[r, t] = float("-inf")
    return out


@pytest.mark.parametrize("seed", range(6))
def test_matches_the_python_reference(seed):
    rng = random.Random(seed)
    n, vocab = rng.randint(1, 9), rng.choice([1, 31, 33, 95, 257, 1000])
    rows = sorted(rng.sample(range(n), rng.randint(0, n)))
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, vocab, generator=g)
    words = (vocab + 31) // 32 + rng.randint(0, 2)  # a mask may be wider than the logits
    bitmask = torch.randint(-2**31, 2**31 - 1, (len(rows), words), dtype=torch.int32, generator=g)
    expected = reference(logits, bitmask, rows)
    apply_token_bitmask(logits, bitmask, rows)
    assert torch.equal(logits, expected)


def test_matches_xgrammars_kernel():
    xgr = pytest.importorskip("xgrammar")
    g = torch.Generator().manual_seed(7)
    vocab = 49152 + 7
    logits = torch.randn(5, vocab, generator=g)
    bitmask = torch.randint(-2**31, 2**31 - 1, (5, (vocab + 31) // 32), dtype=torch.int32, generator=g)
    ours, theirs = logits.clone(), logits.clone()
    apply_token_bitmask(ours, bitmask, list(range(5)))
    xgr.apply_token_bitmask_inplace(theirs, bitmask)
    assert torch.equal(ours, theirs)


def test_all_ones_changes_nothing_and_a_narrow_mask_is_refused():
    logits = torch.randn(2, 70)
    before = logits.clone()
    apply_token_bitmask(logits, torch.full((2, 3), -1, dtype=torch.int32), [0, 1])
    assert torch.equal(logits, before)
    with pytest.raises(ValueError):
        unpack_bitmask(torch.zeros(1, 2, dtype=torch.int32), 70)
