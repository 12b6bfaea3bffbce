"""Weight-only int8 (`quantization: int8`): the pass replaces every linear layer, and the quantized
model's greedy tokens stay close to Hugging Face's fp32 model (the independent reference; a
continuation that diverges once differs from there on, so the bar is 70% of positions: 74% measured)."""

import pytest
import torch

from llmop.engine.sampling_params import SamplingParams

NEW = 16


@pytest.fixture(scope="module")
def int8_llm():
    from llmop.engine.llm import LLM

    return LLM(None, dtype="float32", quantization="int8", kv_cache_memory_bytes=64 << 20,
               max_num_seqs=8, max_num_batched_tokens=512)


def test_every_linear_layer_is_int8(int8_llm):
    from llmop.engine.quantization import Int8Linear

    model = int8_llm.engine.executor.runner.model
    layers = [m for m in model.modules() if isinstance(m, Int8Linear)]
    assert len(layers) == 30 * 7 + 1  # seven projections per decoder layer, and the (tied) LM head
    assert all(m.weight.dtype == torch.int8 and m.scale.shape == (m.out_features,) for m in layers)
    assert model.model.embed_tokens.weight.dtype == torch.float32, "the embedding table stays float"
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())


def test_int8_greedy_tokens_stay_close_to_hf(int8_llm, prompt_ids, hf_continuations):
    outs = int8_llm.generate(prompt_ids, SamplingParams(max_tokens=NEW, temperature=0.0, ignore_eos=True))
    ref = [tokens[:NEW] for tokens, _ in hf_continuations]
    assert sum(o.token_ids[0] == r[0] for o, r in zip(outs, ref)) >= len(ref) - 1
    same = sum(a == b for o, r in zip(outs, ref) for a, b in zip(o.token_ids, r))
    assert same >= 0.7 * NEW * len(ref), f"{same} of {NEW * len(ref)} greedy tokens agree with HF fp32"


def test_weight_passes_after_lora_are_refused(hf_checkpoint_dir):
    from llmop.engine.lora.layers import LoraState, apply_lora
    from llmop.engine.lora.ops import get_lora_ops
    from llmop.engine.quantization import quantize_int8

    from llmop.engine.checkpoint import load_state_dict, open_checkpoint
    from llmop.engine.model import build_model

    ckpt = open_checkpoint(str(hf_checkpoint_dir))
    model = build_model(ckpt.config, load_state_dict(ckpt, torch.float32), torch.float32, torch.device("cpu"), 64)
    apply_lora(model, ckpt.config.num_layers, LoraState(1, 4, get_lora_ops("torch", torch.device("cpu")), torch.device("cpu"), torch.float32))
    with pytest.raises(ValueError, match="before the LoRA pass"):
        quantize_int8(model, torch.float32)
    from llmop.engine.fp16_weights import Fp16Op, convert_fp16

    with pytest.raises(ValueError, match="before the LoRA pass"):  # the same pass machinery
        convert_fp16(model, torch.device("cpu"), torch.float32, Fp16Op.ONE_THREAD)


def test_int8_says_when_it_cannot_pay():
    from llmop.engine.quantization import int8_slowdown

    assert "slower" in int8_slowdown(torch.device("cpu"), torch.float32)
    assert int8_slowdown(torch.device("cpu"), torch.bfloat16) is None
    assert int8_slowdown(torch.device("cuda"), torch.float32) is None
