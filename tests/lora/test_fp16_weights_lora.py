"""LoRA over fp16 weights (`quantization: fp16`, the CPU's fbgemm path): the adapters wrap the
converted layers and a batch mixing the base and four adapters stays with PEFT's fp32 tokens."""

import pytest


@pytest.fixture(scope="module")
def fp16_lora_engine(hf_checkpoint_dir, adapter_dirs, lora_kit):
    from llmop.engine.engine import LLMEngine

    engine = LLMEngine(lora_kit.engine_config(hf_checkpoint_dir, adapter_dirs, quantization="fp16"))
    yield engine
    engine.shutdown()


def test_mixed_batch_over_fp16_weights_keeps_peft_tokens(fp16_lora_engine, references, prompt_ids, lora_kit):
    from llmop.engine.fp16_weights import Fp16WeightLinear

    eng = fp16_lora_engine
    pairs = [(i, m) for i in range(len(prompt_ids)) for m in lora_kit.MODELS]
    for k, (i, m) in enumerate(pairs):
        eng.add_request(f"fp16-{k}", prompt_ids[i], lora_kit.greedy(), adapter=m)
    tokens = lora_kit.run_to_completion(eng)
    wrapped = [m for m in eng.executor.runner.model.modules() if type(m).__name__ == "LoraLinear"]
    assert len(wrapped) == 30 * 7 and all(isinstance(m.base, Fp16WeightLinear) for m in wrapped)  # the first load applied LoRA
    want = {k: references[(i, m)][0][:lora_kit.NEW_TOKENS] for k, (i, m) in enumerate(pairs)}
    assert all(tokens[f"fp16-{k}"][0] == w[0] for k, w in want.items())
    same = sum(a == b for k, w in want.items() for a, b in zip(tokens[f"fp16-{k}"], w))
    total = sum(len(w) for w in want.values())
    assert same >= 0.9 * total, f"{same} of {total} greedy tokens agree with PEFT's fp32"
