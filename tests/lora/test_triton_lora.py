"""The engine with the Triton LoRA kernels forced on still gives PEFT's logits.

On the CPU the kernels run in Triton's interpreter (slow: 7 projections x 30 layers x 2 launches
per forward pass), so this is one forward pass: the prefill of one prompt under the base model and
each of the four adapters (ranks 4..32, different target modules) in the same batch.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before llmop.kernels' op modules are imported

import pytest  # noqa: E402
import torch  # noqa: E402


LOGIT_ATOL = 2e-3  # as in test_peft_parity: summation order only


@pytest.mark.slow
def test_triton_lora_mixed_batch_logits_match_peft(hf_checkpoint_dir, adapter_dirs, references, prompt_ids, lora_kit):
    from llmop.engine.engine import LLMEngine

    eng = LLMEngine(lora_kit.engine_config(hf_checkpoint_dir, adapter_dirs, lora_backend="triton"))
    prompt = len(prompt_ids) - 1
    for k, m in enumerate(lora_kit.MODELS):
        eng.add_request(f"triton-{k}", prompt_ids[prompt], lora_kit.greedy(1), adapter=m)
    out = eng.scheduler.schedule()
    assert len(out.chunks) == len(lora_kit.MODELS) and all(c.completes for c in out.chunks)
    batch = eng.build_batch(out)
    logits = eng.executor.logits(batch)
    assert eng.executor.runner.lora.state.ops.name == "triton"
    for row, rid in enumerate(batch.row_requests):
        m = lora_kit.MODELS[int(rid.removeprefix("triton-"))]
        torch.testing.assert_close(logits[row], references[(prompt, m)][1], atol=LOGIT_ATOL, rtol=0, msg=str(m))
