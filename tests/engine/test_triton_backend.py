"""The engine with the Triton attention kernels forced on still produces HF's greedy tokens.

On the CPU the kernels run in Triton's interpreter (slow), so the case is small: two prompts in one
batch with a 16-token budget, so a prompt is prefilled in chunks that read earlier chunks from the
paged cache, then both decode together through the decode kernel (one KV split at this size: the
split-KV merge is covered by tests/kernels/test_paged_attention.py).
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before llmop.kernels' op modules are imported

import pytest  # noqa: E402

from llmop.engine.sampling_params import SamplingParams  # noqa: E402

PROMPTS = ["Once upon a time there was a small robot who liked to count the stars at night.", "Paris is the capital of"]
NEW = 3


@pytest.mark.slow
def test_triton_attention_matches_hf_greedy(hf_reference):
    from llmop.engine.llm import LLM

    from .conftest import hf_greedy

    llm = LLM(None, dtype="float32", attention_backend="triton", kv_cache_memory_bytes=16 << 20,
              max_num_seqs=4, max_num_batched_tokens=16)
    ids = [llm.tokenizer.encode(p) for p in PROMPTS]
    assert len(ids[0]) > 16, "the first prompt must need more than one prefill chunk"
    outs = llm.generate(ids, SamplingParams(max_tokens=NEW, temperature=0.0, ignore_eos=True))
    for prompt, out in zip(ids, outs):
        assert list(out.token_ids) == hf_greedy(hf_reference, prompt, NEW)[0]
