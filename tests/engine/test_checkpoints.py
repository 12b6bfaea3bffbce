"""Checkpoint formats and architectures: every path gives HF transformers' logits.

The embedded model is read once from its GGUF and once from the HF directory converted from it;
tiny random Llama 3 (llama3 RoPE scaling), Qwen2 (q/k/v bias) and Mistral checkpoints written by
transformers itself cover the architecture switches.
"""

import shutil

import pytest
import torch

from llmop.engine.llm import LLM
from llmop.engine.sampling_params import SamplingParams

PROMPT = [1, 504, 17012, 593, 7934, 30598, 309, 338, 2518, 346, 288, 1464, 284, 4511] * 3


def _prefill_logits(llm: LLM, ids) -> torch.Tensor:
    eng = llm.engine
    req = eng.add_request("probe", list(ids), SamplingParams(max_tokens=1))
    out = eng.scheduler.schedule()
    logits = eng.executor.logits(eng.build_batch(out))[0]
    eng.abort(req.request_id)
    return logits


def _hf_logits(model, ids) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0, -1].float()


def test_hf_directory_equals_gguf(hf_checkpoint_dir, engine_llm):
    from_dir = LLM(str(hf_checkpoint_dir), dtype="float32", kv_cache_memory_bytes=32 << 20)
    assert from_dir.tokenizer.encode("Hello, world! 123") == engine_llm.tokenizer.encode("Hello, world! 123")
    assert from_dir.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}]) == \
        engine_llm.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    torch.testing.assert_close(_prefill_logits(from_dir, PROMPT), _prefill_logits(engine_llm, PROMPT),
                               atol=1e-4, rtol=0)


def _tiny(kind: str):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    common = dict(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  rms_norm_eps=1e-5, tie_word_embeddings=False)
    if kind == "llama3":
        return LlamaConfig(**common, rope_theta=500000.0, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64})
    if kind == "qwen2":
        return Qwen2Config(**common, rope_theta=1000000.0)
    return MistralConfig(**common, rope_theta=10000.0, sliding_window=None)


@pytest.mark.parametrize("kind", ["llama3", "qwen2", "mistral"])
def test_tiny_random_architectures_match_hf(kind, tmp_path, hf_checkpoint_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_tiny(kind), dtype=torch.float32).eval()
    if kind == "qwen2":  # make the q/k/v biases matter
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                torch.nn.init.normal_(proj.bias, std=0.5)
    model.save_pretrained(tmp_path)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(hf_checkpoint_dir / f, tmp_path / f)
    llm = LLM(str(tmp_path), dtype="float32", kv_cache_memory_bytes=8 << 20)
    ids = PROMPT * 3  # 126 tokens: past llama3's original context of 64, where scaling matters
    torch.testing.assert_close(_prefill_logits(llm, ids), _hf_logits(model, ids), atol=1e-4, rtol=1e-4)
    # and greedy decoding through the paged cache agrees token for token
    ref, cur = [], list(ids)
    for _ in range(8):
        ref.append(int(_hf_logits(model, cur).argmax()))
        cur.append(ref[-1])
    got = llm.generate([ids], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))[0]
    assert list(got.token_ids) == ref
