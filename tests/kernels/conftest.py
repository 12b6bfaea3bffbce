"""Kernel tests: Triton kernels against their torch references, on the CPU under the interpreter.

`TRITON_INTERPRET` must be set before the op modules are imported (Triton reads it when a kernel is
decorated), hence at the top of this file.  Without CUDA the kernels are interpreted anyway (see
`llmop.kernels._triton`); with `TRITON_INTERPRET=0` on a GPU machine the same tests run compiled.

Helpers live here as fixtures because test modules are imported with `--import-mode=importlib`.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

# Tolerances per dtype (atol, rtol) for attention outputs of magnitude ~1: a few units in the last
# place of the output dtype.  The kernel accumulates in float32 but rounds probabilities to the
# cache dtype before P @ V (as FlashAttention does); the reference runs SDPA in the input dtype, so
# 16-bit types differ by ~2-4 ulps.
ATTN_TOL = {torch.float32: (2e-5, 1e-5), torch.float16: (3e-3, 3e-3), torch.bfloat16: (2e-2, 2e-2)}


@pytest.fixture
def device():
    """CUDA when the kernels are compiled and a GPU exists, else the CPU (interpreter)."""
    from llmop.kernels._triton import INTERPRET

    return "cuda" if torch.cuda.is_available() and not INTERPRET else "cpu"


def cdiv(a, b):
    return -(-a // b)


class PagedCase:
    """A paged KV cache holding random contexts in shuffled blocks, plus each context contiguous.

    Unused blocks, the tails of partial last blocks, and every padded block-table entry hold NaN,
    so a kernel that reads outside a sequence's context produces NaN and fails.
    """

    def __init__(self, seq_lens, q_lens, num_kv_heads, gqa, head_dim, block_size, dtype, device, seed, pad_tokens=0):
        gen = torch.Generator().manual_seed(seed)
        self.dtype, self.device = dtype, device
        num_seqs = len(seq_lens)
        need = [cdiv(n, block_size) for n in seq_lens]
        num_blocks = sum(need) + 3
        poison_block = num_blocks - 1
        perm = torch.randperm(num_blocks - 1, generator=gen).tolist()
        max_blocks = max(need) + 1
        self.block_tables = torch.full((num_seqs, max_blocks), poison_block, dtype=torch.int32)
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        self.key_cache = torch.full(shape, float("nan"), dtype=dtype)
        self.value_cache = torch.full(shape, float("nan"), dtype=dtype)
        self.keys, self.values = [], []
        for i, (n, b) in enumerate(zip(seq_lens, need)):
            blocks = [perm.pop() for _ in range(b)]
            self.block_tables[i, :b] = torch.tensor(blocks, dtype=torch.int32)
            k = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
            v = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
            pos = torch.arange(n)
            blk = self.block_tables[i, pos // block_size].long()
            self.key_cache[blk, pos % block_size] = k
            self.value_cache[blk, pos % block_size] = v
            self.keys.append(k)
            self.values.append(v)
        self.seq_lens = torch.tensor(seq_lens, dtype=torch.int32)
        self.q_lens = list(q_lens)
        self.query_start_loc = torch.zeros(num_seqs + 1, dtype=torch.int32)
        self.query_start_loc[1:] = torch.tensor(q_lens).cumsum(0)
        num_tokens = int(self.query_start_loc[-1]) + pad_tokens
        self.query = torch.randn(num_tokens, num_kv_heads * gqa, head_dim, generator=gen).to(dtype)
        for name in ("block_tables", "key_cache", "value_cache", "seq_lens", "query_start_loc", "query"):
            setattr(self, name, getattr(self, name).to(device))

    def poisoned_out(self):
        return torch.full_like(self.query, float("nan"))

    def dense(self, scale=None):
        """Attention of every query token computed with torch SDPA on the contiguous contexts."""
        outs = []
        for i, n in enumerate(self.seq_lens.tolist()):
            a, b = self.query_start_loc[i].item(), self.query_start_loc[i + 1].item()
            q = self.query[a:b].float().transpose(0, 1)[None]
            k = self.keys[i].float().transpose(0, 1)[None].to(self.device)
            v = self.values[i].float().transpose(0, 1)[None].to(self.device)
            q_pos = torch.arange(n - (b - a), n, device=self.device)
            mask = torch.arange(n, device=self.device)[None, :] <= q_pos[:, None]
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
            outs.append(o[0].transpose(0, 1))
        return torch.cat(outs)


@pytest.fixture
def paged_case():
    """Factory: `paged_case(seq_lens, q_lens, num_kv_heads, gqa, head_dim, block_size, dtype, device, seed)`."""
    return PagedCase


def irregular_seq_lens(num_seqs, block_size, seed):
    """Context lengths 1 .. > 2 blocks, always including 1, a full block, block+1 and 2 blocks+."""
    gen = torch.Generator().manual_seed(seed)
    edge = [1, block_size, block_size + 1, 2 * block_size + 3]
    rand = torch.randint(1, 3 * block_size + 2, (num_seqs,), generator=gen).tolist()
    lens = (edge + rand)[:num_seqs]
    perm = torch.randperm(num_seqs, generator=gen).tolist()
    return [lens[p] for p in perm]


@pytest.fixture
def seq_lens_for():
    """Factory: `seq_lens_for(num_seqs, block_size, seed)`, see `irregular_seq_lens`."""
    return irregular_seq_lens


@pytest.fixture
def attn_tol():
    return ATTN_TOL
