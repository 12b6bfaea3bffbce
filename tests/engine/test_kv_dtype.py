"""kv_cache_dtype is honoured: the pool's blocks follow its bytes per token, a 16-bit cache under an
fp32 model still decodes like the fp32 cache, fp8 runs through the Triton kernels and is refused on
the CPU's torch attention, and the operator's sizing counts the blocks the engine allocates."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before llmop.kernels' op modules are imported

import pytest  # noqa: E402
import torch  # noqa: E402

from llmop.engine.sampling_params import SamplingParams  # noqa: E402

BUDGET = 64 << 20


def test_bf16_cache_under_fp32_model(engine_llm, prompt_ids):
    from llmop.engine.llm import LLM

    llm = LLM(None, dtype="float32", kv_cache_dtype="bfloat16", kv_cache_memory_bytes=BUDGET,
              max_num_seqs=16, max_num_batched_tokens=512)
    eng = llm.engine
    assert eng.executor.runner.kv_caches[0][0].dtype == torch.bfloat16
    per_token = 2 * 30 * 3 * 64 * 2  # layers x kv heads x head dim x (K, V) x 2 bytes
    assert eng.kv_spec.num_blocks == BUDGET // (per_token * eng.kv_spec.block_size)
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    ours = [o.token_ids for o in llm.generate(prompt_ids, params)]
    ref = [o.token_ids for o in engine_llm.generate(prompt_ids, params)]
    assert all(a[0] == b[0] for a, b in zip(ours, ref)), "first tokens must not change with a bf16 cache"
    same = sum(x == y for a, b in zip(ours, ref) for x, y in zip(a, b))
    assert same >= 0.8 * sum(len(a) for a in ref)


def test_fp8_cache_is_refused_on_the_torch_attention():
    from llmop.engine.engine import LLMEngine

    with pytest.raises(ValueError, match="fp8_e4m3 needs the Triton attention kernels"):
        LLMEngine(dtype="bfloat16", kv_cache_dtype="fp8_e4m3", attention_backend="torch", kv_cache_memory_bytes=BUDGET)


@pytest.mark.slow
def test_fp8_cache_through_the_triton_kernels(hf_reference):
    """Interpreted Triton kernels (slow): an fp8 cache holds a quarter of the fp32 bytes per token,
    and the greedy tokens of a short prompt still match HF's fp32 model."""
    from llmop.engine.llm import LLM

    from .conftest import hf_greedy

    llm = LLM(None, dtype="float32", kv_cache_dtype="fp8_e4m3", attention_backend="triton",
              kv_cache_memory_bytes=16 << 20, max_num_seqs=2, max_num_batched_tokens=32)
    assert llm.engine.executor.runner.kv_caches[0][0].dtype == torch.float8_e4m3fn
    assert llm.engine.kv_spec.bytes_per_block == 2 * 30 * 3 * 64 * 16
    ids = llm.tokenizer.encode("Paris is the capital of France. Berlin is the capital of")
    out = llm.generate([ids], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))[0]
    assert list(out.token_ids) == hf_greedy(hf_reference, ids, 3)[0]


@pytest.mark.parametrize("kv_dtype", ["auto", "float16", "fp8_e4m3"])
def test_operator_sizing_and_engine_count_the_same_blocks(kv_dtype):
    from llmop.engine.checkpoint import open_checkpoint
    from llmop.engine.kv_cache import plan_kv_cache, resolve_kv_dtype
    from llmop.operator.api.llmdeployment import LLMDeploymentSpec
    from llmop.operator.build.engine_config import engine_config
    from llmop.operator.build.sources import Sources
    from llmop.operator.sizing.from_spec import plan_for

    spec = LLMDeploymentSpec.model_validate({
        "accelerator": {"memoryPerGPU": "16Gi"}, "kvCache": {"budgetTokens": 100_000, "dtype": kv_dtype},
    })
    plan = plan_for(spec)
    cfg = engine_config(spec, "demo", plan, Sources(model=None, adapters=(), init_containers=(), claims=()))
    assert cfg.kv_cache_dtype != "auto", "the operator renders the dtype it sized for"
    model_dtype = torch.bfloat16  # what the engine's auto dtype is on CUDA, where the operator deploys it
    engine_plan = plan_kv_cache(open_checkpoint(cfg.model).config,
                                resolve_kv_dtype(cfg.kv_cache_dtype, model_dtype, "triton"),
                                cfg.block_size, cfg.kv_cache_memory_bytes)
    assert engine_plan.num_blocks == plan.kv_blocks
