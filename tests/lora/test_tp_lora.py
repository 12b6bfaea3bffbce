"""Multi-LoRA under tensor parallelism: the four adapters and the base model in one batch at TP=3
give PEFT's tokens and logits, as at TP=1 (tests/lora/test_peft_parity.py).

Each rank writes its slice of every adapter, cut like the base layer (A whole and B by output rows
for q/k/v/gate/up; A by input columns and B whole for o/down, whose partial sums join the base
layer's all-reduce). The engine loads the HF safetensors checkpoint, so each rank reads only its
slices from the file.
"""

import pytest
import torch

LOGIT_ATOL = 2e-3  # as at TP=1


@pytest.fixture(scope="module")
def tp3_lora_engine(hf_checkpoint_dir, adapter_dirs, lora_kit):
    from llmop.engine.engine import LLMEngine

    eng = LLMEngine(lora_kit.engine_config(hf_checkpoint_dir, adapter_dirs, tensor_parallel_size=3))
    yield eng
    eng.shutdown()


def test_mixed_batch_logits_match_peft_at_tp3(tp3_lora_engine, references, prompt_ids, lora_kit):
    eng = tp3_lora_engine
    pairs = [(i, m) for i in range(len(prompt_ids)) for m in lora_kit.MODELS]
    for k, (i, m) in enumerate(pairs):
        eng.add_request(f"tp-logits-{k}", prompt_ids[i], lora_kit.greedy(1), adapter=m)
    out = eng.scheduler.schedule()
    batch = eng.build_batch(out)
    assert len(lora_kit.slots_of(eng)) == len(lora_kit.ADAPTERS)
    logits = eng.executor.logits(batch)
    for k in range(len(pairs)):
        eng.abort(f"tp-logits-{k}")
    for row, rid in enumerate(batch.row_requests):
        i, m = pairs[int(rid.removeprefix("tp-logits-"))]
        torch.testing.assert_close(logits[row], references[(i, m)][1], atol=LOGIT_ATOL, rtol=0, msg=f"{m} prompt {i}")


def test_mixed_batch_greedy_tokens_match_peft_at_tp3(tp3_lora_engine, references, prompt_ids, lora_kit):
    eng = tp3_lora_engine
    pairs = [(i, m) for i in range(len(prompt_ids)) for m in lora_kit.MODELS]
    for k, (i, m) in enumerate(pairs):
        eng.add_request(f"tp-mixed-{k}", prompt_ids[i], lora_kit.greedy(), adapter=m)
    tokens = lora_kit.run_to_completion(eng)
    for k, (i, m) in enumerate(pairs):
        assert tokens[f"tp-mixed-{k}"] == references[(i, m)][0][: lora_kit.NEW_TOKENS], (m, i)
    assert eng.blocks.pool.num_free == eng.blocks.pool.num_blocks
