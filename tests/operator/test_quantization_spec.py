"""spec.model.quantization: sizing counts the bytes the engine holds, and the engine is told to quantize."""

import dataclasses

import pytest
from pydantic import ValidationError

from llmop.operator.api.llmdeployment import LLMDeploymentSpec
from llmop.operator.build.engine_config import engine_config
from llmop.operator.build.errors import SpecError, SpecReason
from llmop.operator.build.sources import Sources
from llmop.operator.sizing.from_spec import plan_for

NO_SOURCES = Sources(model=None, adapters=(), init_containers=(), claims=())


def _spec(quantization: str, accelerator: str = "gpu") -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate({
        "model": {"source": "hf://meta-llama/Meta-Llama-3-8B-Instruct", "quantization": quantization},
        "accelerator": {"memoryPerGPU": "24Gi", "type": accelerator}, "kvCache": {"budgetTokens": 8192},
    })


def test_int8_weights_are_sized_at_one_byte_and_rendered():
    plain, int8 = plan_for(_spec("none")), plan_for(_spec("int8"))
    params = plain.request.architecture.parameters
    table = 128256 * 4096  # the embedding stays bfloat16 under int8 (the untied head is int8)
    norms = (2 * 32 + 1) * 4096  # and so do the norms
    # one bfloat16 scale per output channel: q 4096, k and v 1024 each, gate and up 14336 each, o and
    # down 4096 each, per layer; the LM head's 128256
    scales = 32 * (4096 + 2 * 1024 + 2 * 14336 + 2 * 4096) + 128256
    assert plain.chosen.weights_bytes == 2 * params
    assert int8.chosen.weights_bytes == params + table + norms + 2 * scales
    assert int8.request.kv_bytes_per_token == plain.request.kv_bytes_per_token, "KV stays bfloat16"
    cfg = engine_config(_spec("int8"), "llama", int8, NO_SOURCES)
    assert cfg.quantization == "int8" and cfg.kv_cache_dtype == "bfloat16"
    assert engine_config(_spec("none"), "llama", plain, NO_SOURCES).quantization == "none"


def test_auto_is_the_default_and_sized_as_the_engine_may_resolve_it():
    """The engine resolves `auto` on the node: plain weights on a GPU; on a CPU fp16 weights over
    fp32 activations (an x86 CPU without AMX) or bf16 ones (AMX).
    Sizing counts a GPU's auto as none, a CPU's weights at fp32 (the largest), as it counts none
    there, with the KV cache the catalog's dtype gives; the rendered config keeps `auto`."""
    gpu, plain_gpu = plan_for(_spec("auto")), plan_for(_spec("none"))
    assert gpu.chosen == plain_gpu.chosen and gpu.request == plain_gpu.request
    assert engine_config(_spec("auto"), "llama", gpu, NO_SOURCES).quantization == "auto"
    cpu, plain, fp16 = plan_for(_spec("auto", "cpu")), plan_for(_spec("none", "cpu")), plan_for(_spec("fp16", "cpu"))
    at = lambda plan: plan.request.architecture.weight_bytes_per_gpu(1)  # noqa: E731
    assert at(cpu) == at(plain) == 2 * at(plain_gpu) and at(cpu) > at(fp16)  # the catalog's bf16, at 4 bytes
    assert cpu.request.kv_bytes_per_token == plain.request.kv_bytes_per_token < fp16.request.kv_bytes_per_token
    assert plain.request.kv_bytes_per_token == plain_gpu.request.kv_bytes_per_token  # bf16 KV, rendered
    cfg = engine_config(_spec("auto", "cpu"), "llama", cpu, NO_SOURCES)
    assert (cfg.quantization, cfg.kv_cache_dtype, cfg.device) == ("auto", "bfloat16", "cpu")
    unset = LLMDeploymentSpec.model_validate({"model": {"source": "hf://meta-llama/Meta-Llama-3-8B-Instruct"},
                                              "accelerator": {"memoryPerGPU": "24Gi"}})
    assert unset.model.quantization == "auto"


def test_the_engines_float_dtype_on_a_cpu_is_sized_at_fp32():
    """With no pinned dtype the engine computes in bf16 on a CPU with BF16 and in fp32 on one without:
    sizing counts fp32 weights (none) and fp32 embedding and norms under int8 weights, while the KV
    cache keeps the dtype the catalog's bf16 gives (rendered, so the engine holds that one)."""
    at = lambda plan: plan.request.architecture.weight_bytes_per_gpu(1)  # noqa: E731
    gpu, cpu = plan_for(_spec("none")), plan_for(_spec("none", "cpu"))
    params = gpu.request.architecture.parameters
    assert (at(gpu), at(cpu)) == (2 * params, 4 * params)
    int8_gpu, int8_cpu = plan_for(_spec("int8")), plan_for(_spec("int8", "cpu"))
    table, norms = 128256 * 4096, (2 * 32 + 1) * 4096
    scales = 32 * (4096 + 2 * 1024 + 2 * 14336 + 2 * 4096) + 128256
    assert at(int8_cpu) - at(int8_gpu) == 2 * (table + norms + scales)
    for plan, spec in ((cpu, _spec("none", "cpu")), (int8_cpu, _spec("int8", "cpu"))):
        assert plan.request.kv_bytes_per_token == gpu.request.kv_bytes_per_token
        assert engine_config(spec, "llama", plan, NO_SOURCES).kv_cache_dtype == "bfloat16"


@pytest.mark.parametrize("stored", ["int4", "fp8", "int8"])
def test_a_checkpoint_stored_below_16_bits_is_sized_as_the_floats_the_engine_serves(stored):
    """The engine dequantizes such checkpoints (a GGUF Q4 file to its float dtype): bf16 on a GPU,
    up to fp32 on a CPU node; int8 quantization stores one byte per weight whatever the checkpoint."""
    def spec(quantization: str, accelerator: str) -> LLMDeploymentSpec:
        return LLMDeploymentSpec.model_validate({
            "model": {"source": "pvc://models/llama", "quantization": quantization, "architecture": {
                "parameters": 8_000_000_000, "layers": 32, "attentionHeads": 32, "kvHeads": 8, "headDim": 128,
                "dtype": stored, "maxContextLength": 8192}},
            "accelerator": {"memoryPerGPU": "80Gi", "type": accelerator}, "kvCache": {"budgetTokens": 8192}})

    at = lambda plan: plan.request.architecture.weight_bytes_per_gpu(1)  # noqa: E731
    assert at(plan_for(spec("none", "gpu"))) == 2 * 8_000_000_000
    assert at(plan_for(spec("none", "cpu"))) == 4 * 8_000_000_000
    assert at(plan_for(spec("int8", "gpu"))) == 2 * 8_000_000_000  # no sizes: at the activations' bf16
    assert plan_for(spec("none", "gpu")).request.resolved_kv_dtype == "bfloat16"


def test_fp16_weights_are_sized_at_two_bytes_over_fp32_activations():
    plain, fp16 = plan_for(_spec("none")), plan_for(_spec("fp16", "cpu"))
    params = plain.request.architecture.parameters
    table, norms = 128256 * 4096, (2 * 32 + 1) * 4096
    # linear layers (the untied head included) at two bytes, no scales; embedding and norms in fp32
    assert fp16.chosen.weights_bytes == 2 * (params - table - norms) + 4 * (table + norms)
    assert fp16.request.kv_bytes_per_token == 2 * plain.request.kv_bytes_per_token, "KV in fp32"
    cfg = engine_config(_spec("fp16", "cpu"), "llama", fp16, NO_SOURCES)
    assert (cfg.quantization, cfg.kv_cache_dtype, cfg.device) == ("fp16", "float32", "cpu")


def test_fp16_weights_refuse_a_16_bit_activation_dtype():
    spec = _spec("fp16", "cpu").model_copy(deep=True)
    spec.engine.overrides["dtype"] = "bfloat16"  # the engine would refuse it at start-up: crash loop
    with pytest.raises(SpecError, match="engine.overrides.dtype bfloat16 with model.quantization fp16") as e:
        engine_config(spec, "llama", plan_for(spec), NO_SOURCES)
    assert e.value.reason is SpecReason.INVALID_ENGINE_CONFIG
    spec.engine.overrides["dtype"] = "float32"
    assert engine_config(spec, "llama", plan_for(spec), NO_SOURCES).dtype == "float32"


def test_fp16_weights_are_refused_on_gpus():
    with pytest.raises(ValidationError, match="runs on the CPU only"):
        _spec("fp16")


def test_fp16_weights_without_the_sizes_are_counted_at_the_activations_dtype():
    # the embedding and norms stay fp32 and their share is unknown: fp32 bytes are the upper bound
    arch = plan_for(_spec("fp16", "cpu")).request.architecture
    unsized = dataclasses.replace(arch, vocab_size=None, hidden_size=None)
    assert unsized.weight_bytes_per_gpu(2) == arch.parameters * 4 // 2
    assert unsized.weight_bytes_per_gpu(1) > arch.weight_bytes_per_gpu(1)
    plain = dataclasses.replace(unsized, dtype="bfloat16", activation_dtype=None)
    assert plain.weight_bytes_per_gpu(1) == arch.parameters * 2  # float weights: unchanged


def test_int8_weights_without_the_sizes_are_counted_at_the_activations_dtype():
    # int8 keeps the embedding and norms in bf16 (a GPU's): one byte for every weight undercounted
    arch = plan_for(_spec("int8")).request.architecture
    unsized = dataclasses.replace(arch, vocab_size=None, hidden_size=None)
    assert unsized.weight_bytes_per_gpu(1) == arch.parameters * 2 >= arch.weight_bytes_per_gpu(1)


@pytest.mark.parametrize("quantization", ["auto", "none"])
@pytest.mark.parametrize("accelerator", ["gpu", "cpu"])
def test_a_pinned_dtype_is_what_sizing_counts(quantization, accelerator):
    """engine.overrides.dtype float32 makes the engine hold fp32 weights and (by default) an fp32 KV
    cache, whatever `auto` would pick; sizing counts that, and renders that KV dtype."""
    spec = _spec(quantization, accelerator).model_copy(deep=True)
    spec.engine.overrides["dtype"] = "float32"
    pinned, plain = plan_for(spec), plan_for(_spec("none"))  # a GPU's none: the catalog's bf16
    at = lambda plan: plan.request.architecture.weight_bytes_per_gpu(1)  # noqa: E731
    assert at(pinned) == 2 * at(plain)  # the catalog's bf16 weights, at 4 bytes
    assert pinned.request.kv_bytes_per_token == 2 * plain.request.kv_bytes_per_token
    assert engine_config(spec, "llama", pinned, NO_SOURCES).kv_cache_dtype == "float32"


def test_int8_over_pinned_fp32_activations_keeps_its_table_and_kv_in_fp32():
    spec = _spec("int8").model_copy(deep=True)
    spec.engine.overrides["dtype"] = "float32"
    pinned, bf16 = plan_for(spec), plan_for(_spec("int8"))
    table, norms = 128256 * 4096, (2 * 32 + 1) * 4096
    at = lambda plan: plan.request.architecture.weight_bytes_per_gpu(1)  # noqa: E731
    assert at(pinned) > at(bf16) + 2 * (table + norms) - 1  # fp32 table and norms (and scales)
    assert engine_config(spec, "llama", pinned, NO_SOURCES).kv_cache_dtype == "float32"
