"""Sizing arithmetic against hand-computed numbers (the field's Llama 3 figures included)."""

import pytest

from llmop.operator.api import LLMDeploymentSpec
from llmop.operator.sizing.architecture import Accelerator, Architecture
from llmop.operator.sizing.catalog import CATALOG, lookup, normalize
from llmop.operator.sizing.from_spec import request_for
from llmop.operator.sizing.plan import SizingError, SizingRequest, size
from llmop.operator.sizing.report import render

GiB, KiB = 2**30, 2**10
L70, L8 = CATALOG["llama-3-70b"], CATALOG["llama-3-8b"]
H100 = Accelerator(memory_bytes=80 * GiB, gpus_per_node=8, utilization=0.9, reserved_bytes=2 * GiB)


def test_kv_bytes_per_token_of_llama3():
    assert L70.kv_bytes_per_token() == 320 * KiB  # 2 × 80 × 8 × 128 × 2
    assert L8.kv_bytes_per_token() == 128 * KiB  # 2 × 32 × 8 × 128 × 2
    assert L70.kv_bytes_per_token() * 4096 == 1.25 * GiB  # one 4K-token sequence of 70B
    assert L70.kv_bytes_per_token("float32") == 640 * KiB


def test_70b_for_100_users_of_4k_needs_tp4():
    # weights 141.1 GB; KV 100 × 1.25 GiB = 125 GiB. TP=2: 65.7 + 62.5 + 2 = 130.2 GiB > 72 GiB usable.
    # TP=4: 32.85 + 31.25 + 2 = 66.1 GiB, plus the embedding and LM head every rank holds whole
    # (2 × 128256 × 8192 × 2 B = 3.9 GiB, of which 1/4 was already counted): 69 GiB <= 72 GiB; and
    # the norms, 2 per layer and a final one of 8192 each, also whole on every rank.
    plan = size(SizingRequest(L70, H100, budget_tokens=100 * 4096, max_model_len=8192))
    assert plan.tensor_parallel_size == 4
    c = plan.chosen
    assert c.kv_budget_bytes == 125 * GiB // 4
    table, norms = 128256 * 8192, 161 * 8192
    assert c.weights_bytes == -(-(L70.parameters - 2 * table - norms) * 2 // 4) + (2 * table + norms) * 2
    assert c.usable_bytes == int(0.9 * 80 * GiB)
    assert [x.t for x in plan.candidates] == [1, 2, 3, 4]
    assert "attention heads" in plan.candidates[2].rejected
    # KV left per GPU / (16 tokens × 320 KiB / 4 ranks) = blocks; sequences = blocks // (8192 / 16)
    left = c.usable_bytes - c.weights_bytes - c.reserved_bytes
    assert plan.kv_blocks == left // (16 * 80 * KiB)
    assert plan.max_concurrent_sequences == plan.kv_blocks // 512


def test_8b_fits_one_gpu():
    plan = size(SizingRequest(L8, H100, budget_tokens=8192, max_model_len=8192))
    assert plan.tensor_parallel_size == 1


def test_kv_heads_replicated_past_their_count():
    # 8 KV heads: at TP=16 each GPU still holds 1/8 of the KV cache, not 1/16.
    req = SizingRequest(L70, Accelerator(80 * GiB, gpus_per_node=16), budget_tokens=8192, max_model_len=8192)
    from llmop.operator.sizing.plan import evaluate

    assert evaluate(req, 16).kv_ranks == 8
    assert evaluate(req, 16).kv_budget_bytes == 320 * KiB * 8192 // 8
    assert "KV heads" in evaluate(req, 3).rejected or "attention" in evaluate(req, 3).rejected


def test_too_big_for_one_node_names_the_gpu_count():
    small_node = Accelerator(80 * GiB, gpus_per_node=2)
    with pytest.raises(SizingError) as err:
        size(SizingRequest(L70, small_node, budget_tokens=100 * 4096, max_model_len=8192))
    assert err.value.reason == "ExceedsNode"
    assert "needs 4 GPUs of 80.00 GiB per node; nodes have 2" in str(err.value)


def test_never_fits_when_kv_share_stops_shrinking():
    # 2 KV heads, 16 KiB/token: 20M tokens = 305 GiB; past TP=2 each GPU keeps half (152 GiB > 72 usable).
    arch = Architecture(1_000_000_000, 16, 16, 2, 128)
    with pytest.raises(SizingError) as err:
        size(SizingRequest(arch, H100, budget_tokens=20_000_000, max_model_len=4096))
    assert err.value.reason == "DoesNotFit"
    assert "KV heads are replicated" in str(err.value)


def test_fixed_tensor_size_is_checked():
    req = SizingRequest(L70, H100, budget_tokens=8192, max_model_len=8192, tensor=3)
    with pytest.raises(SizingError, match="does not divide the 64 attention heads"):
        size(req)
    assert size(SizingRequest(L70, H100, 8192, 8192, tensor=8)).tensor_parallel_size == 8


def test_catalog_names():
    assert normalize("hf://meta-llama/Meta-Llama-3-70B-Instruct@main") == "llama-3-70b"
    assert lookup("meta-llama/Llama-3.1-8B-Instruct") is CATALOG["llama-3.1-8b"]
    assert lookup("hf://someone/unknown") is None


def test_request_from_spec_budget_forms():
    base = {"model": {"source": "hf://meta-llama/Meta-Llama-3-8B-Instruct"}}
    assert request_for(LLMDeploymentSpec.model_validate(base)).budget_tokens == 8192  # one max-len sequence
    conc = base | {"kvCache": {"concurrency": 10, "contextLength": 2048}}
    assert request_for(LLMDeploymentSpec.model_validate(conc)).budget_tokens == 20480
    tok = base | {"kvCache": {"budgetTokens": 1000}, "engine": {"maxModelLen": 512}}
    req = request_for(LLMDeploymentSpec.model_validate(tok))
    assert (req.budget_tokens, req.max_model_len) == (1000, 512)


def test_embedded_model_when_no_source():
    req = request_for(LLMDeploymentSpec())
    assert req.architecture is CATALOG["smollm2-135m"]
    assert size(req).tensor_parallel_size == 1


def test_unknown_architecture_is_a_sizing_error():
    spec = LLMDeploymentSpec.model_validate({"model": {"source": "pvc://weights/mystery"}})
    with pytest.raises(SizingError) as err:
        request_for(spec)
    assert err.value.reason == "ArchitectureUnknown"
    assert "spec.model.architecture" in str(err.value)


def test_render_prints_every_term():
    req = SizingRequest(L70, H100, budget_tokens=100 * 4096, max_model_len=8192)
    text = render(req, size(req))
    for needle in ("320.00 KiB", "125.00 GiB", "72.00 GiB usable", "TP=4", "fits", "tensor parallel size 4",
                   "concurrent sequences"):  # fmt: skip
        assert needle in text
