"""Speculative decoding with a draft model in an LLMDeployment, without a cluster: the draft's
source resolved like the model's, its path in the engine config, and sizing that counts its
weights and KV cache on the first GPU (hand-computed numbers on SmolLM2-135M and a 4-layer cut of
it; Llama 3 70B with an 8B draft)."""

import dataclasses

import pytest
from pydantic import ValidationError

from llmop.operator.api import LLMDeploymentSpec
from llmop.operator.build.desired import SpecError, desired_state
from llmop.operator.sizing.architecture import Accelerator
from llmop.operator.sizing.catalog import CATALOG
from llmop.operator.sizing.draft import DraftRequest
from llmop.operator.sizing.from_spec import request_for
from llmop.operator.sizing.plan import SizingError, SizingReason, SizingRequest, evaluate, size
from llmop.operator.sizing.report import render, to_status

from test_builders import SETTINGS, body, engine_config, objects

GiB, MiB = 2**30, 2**20
SMOL, L70, L8 = CATALOG["smollm2-135m"], CATALOG["llama-3-70b"], CATALOG["llama-3-8b"]
# SmolLM2-135M cut after 4 of its 30 layers (engine/draft_checkpoint.py): 3,540,096 parameters per
# layer (q, o 576²; k, v 576×192; gate, up, down 576×1536; two norms), the tied embedding, the final norm.
SMOL4 = dataclasses.replace(SMOL, parameters=4 * 3_540_096 + 49152 * 576 + 576, layers=4)
H100 = Accelerator(80 * GiB)
LLAMA_70B = {"source": "hf://meta-llama/Meta-Llama-3-70B-Instruct", "credentialsSecret": "hf"}


def draft(draft_model: str, **fields) -> dict:
    return {"speculative": {"method": "draft", "draftModel": draft_model, **fields}}


def pod_of(objs) -> dict:
    return objs["Deployment"]["spec"]["template"]["spec"]


# --- the schema --------------------------------------------------------------------------------------


def test_method_draft_is_accepted_and_needs_a_draft_source():
    spec = LLMDeploymentSpec.model_validate({"engine": draft("hf://HuggingFaceTB/SmolLM2-135M-Instruct")})
    assert spec.engine.speculative.draft_model == "hf://HuggingFaceTB/SmolLM2-135M-Instruct"
    for bad in ({"method": "draft"},  # the engine's rule: method draft needs draft_model
                {"method": "draft", "draftModel": "ftp://x"},  # a source, in the model's forms
                {"draftArchitecture": {"parameters": 1, "layers": 1, "attentionHeads": 1, "kvHeads": 1,
                                       "headDim": 1}}):  # draft fields belong to method draft
        with pytest.raises(ValidationError):
            LLMDeploymentSpec.model_validate({"engine": {"speculative": bad}})


# --- sources and the engine config ---------------------------------------------------------------------


def test_an_hf_draft_is_downloaded_with_the_models_credentials_and_rendered_as_its_path():
    objs = objects({"model": LLAMA_70B, "engine": draft("hf://meta-llama/Meta-Llama-3-8B-Instruct@main")})
    spec = engine_config(objs).speculative
    assert (spec.method, spec.draft_model) == ("draft", "/models/hf/meta-llama/Meta-Llama-3-8B-Instruct")
    assert spec.draft_kv_cache_memory_bytes is None  # the engine's default, which sizing counts
    fetch = pod_of(objs)["initContainers"][1]
    assert fetch["name"] == "fetch-draft-model"
    assert fetch["command"] == ["hf", "download", "meta-llama/Meta-Llama-3-8B-Instruct", "--local-dir",
                                "/models/hf/meta-llama/Meta-Llama-3-8B-Instruct", "--revision", "main"]
    assert fetch["envFrom"] == [{"secretRef": {"name": "hf"}}]


def test_a_pvc_draft_is_mounted_read_only():
    objs = objects({"model": {"source": "pvc://weights/llama3-70b", "name": "llama-3-70b"},
                    "engine": draft("pvc://drafts/Meta-Llama-3-8B-Instruct", draftKvCacheMemoryBytes=GiB)})
    spec = engine_config(objs).speculative
    assert (spec.draft_model, spec.draft_kv_cache_memory_bytes) == ("/mnt/pvc/drafts/Meta-Llama-3-8B-Instruct", GiB)
    pod = pod_of(objs)
    assert "initContainers" not in pod
    assert {"name": "pvc-drafts", "persistentVolumeClaim": {"claimName": "drafts", "readOnly": True}} in pod["volumes"]
    assert {"name": "pvc-drafts", "mountPath": "/mnt/pvc/drafts", "readOnly": True} in pod["containers"][0][
        "volumeMounts"]


def test_a_model_that_is_its_own_draft_is_fetched_once():
    llama_8b = "hf://meta-llama/Meta-Llama-3-8B-Instruct"
    objs = objects({"model": {"source": llama_8b}, "engine": draft(llama_8b)})
    cfg = engine_config(objs)
    assert cfg.speculative.draft_model == cfg.model == "/models/hf/meta-llama/Meta-Llama-3-8B-Instruct"
    assert [c["name"] for c in pod_of(objs)["initContainers"]] == ["fetch-model"]


def test_a_draft_in_the_image_is_its_path():
    objs = objects({"engine": draft("/opt/drafts/smollm2-135m")})
    assert engine_config(objs).speculative.draft_model == "/opt/drafts/smollm2-135m"
    assert "initContainers" not in pod_of(objs)


def test_ngram_renders_no_draft():
    spec = engine_config(objects({"engine": {"speculative": {"method": "ngram"}}})).speculative
    assert (spec.method, spec.draft_model, spec.draft_kv_cache_memory_bytes) == ("ngram", None, None)


@pytest.mark.parametrize("spec,reason", [
    ({"engine": draft("pvc://drafts/mystery")}, SizingReason.DRAFT_ARCHITECTURE_UNKNOWN),
    ({"engine": draft("hf://meta-llama/Meta-Llama-3-8B-Instruct")}, SizingReason.DRAFT_INCOMPATIBLE),  # vocab
    ({"model": LLAMA_70B, "engine": {"maxModelLen": 131072, **draft("hf://meta-llama/Meta-Llama-3-8B")},
      "accelerator": {"memoryPerGPU": "141Gi"}}, SizingReason.DRAFT_INCOMPATIBLE),  # 8K context
    ({"model": LLAMA_70B, "kvCache": {"budgetTokens": 409600}, **{"engine": draft(
        "hf://meta-llama/Meta-Llama-3-8B")}}, SizingReason.DOES_NOT_FIT),  # 50 GiB of draft KV on one GPU
    ({"engine": draft("pvc://drafts/smollm2-135m", draftKvCacheMemoryBytes=1024)}, SizingReason.INVALID_BUDGET),
])  # fmt: skip
def test_a_draft_that_cannot_be_sized_is_a_sizing_condition(spec, reason):
    with pytest.raises(SpecError) as err:
        desired_state(body(spec), SETTINGS)
    assert (err.value.condition, err.value.reason) == ("SizingValid", reason)


# --- sizing ----------------------------------------------------------------------------------------


def test_the_draft_counts_its_weights_and_kv_on_the_first_gpu():
    # Target (bf16, tied): 269,030,016 B of weights, 2 × 30 × 3 × 64 × 2 = 23,040 B of KV per token.
    # Draft: 84,945,024 B of weights (the embedding is most of it), 2 × 4 × 3 × 64 × 2 = 3,072 B/token.
    acc = Accelerator(GiB, gpus_per_node=1, utilization=0.9, reserved_bytes=256 * MiB)
    plan = size(SizingRequest(SMOL, acc, budget_tokens=8192, max_model_len=8192, draft=DraftRequest(SMOL4)))
    c = plan.chosen
    assert (c.weights_bytes, c.draft_weights_bytes) == (269_030_016, 84_945_024)
    assert (c.kv_budget_bytes, c.draft_kv_budget_bytes) == (8192 * 23040, 8192 * 3072)
    assert c.need_bytes == 269_030_016 + 8192 * 23040 + 84_945_024 + 8192 * 3072 + 256 * MiB
    # Left after weights and reserve: 966,367,641 - 269,030,016 - 84,945,024 - 268,435,456 = 343,957,145 B,
    # split in pairs of one target block (16 × 23,040) and one draft block (16 × 3,072): 823 of each.
    assert plan.kv_blocks == plan.draft_kv_blocks == 343_957_145 // (16 * 23040 + 16 * 3072) == 823
    assert plan.kv_cache_bytes_per_gpu == 823 * 16 * 23040  # the engine's kv_cache_memory_bytes
    # What the engine then allocates on that GPU stays within the usable memory.
    assert c.weights_bytes + c.draft_weights_bytes + 823 * 16 * (23040 + 3072) + c.reserved_bytes <= c.usable_bytes


def test_a_declared_draft_cache_is_taken_whole_and_the_target_gets_the_rest():
    acc = Accelerator(GiB, gpus_per_node=1, utilization=0.9, reserved_bytes=256 * MiB)
    plan = size(SizingRequest(SMOL, acc, 8192, 8192, draft=DraftRequest(SMOL4, kv_cache_bytes=10 * MiB)))
    assert plan.chosen.draft_kv_budget_bytes == 10 * MiB
    assert plan.kv_cache_bytes_per_gpu == 343_957_145 - 10 * MiB
    assert plan.draft_kv_blocks == 10 * MiB // (16 * 3072) == 213


def test_the_draft_is_never_split_and_can_raise_the_tensor_parallel_size():
    # 70B for 100 users of 4K fits at TP=4 (69 GiB of 72); an 8B draft (14.96 GiB) and 4 GiB of draft
    # KV on the first GPU make TP=4 need 88 GiB there, so TP=8.
    req = SizingRequest(L70, H100, 100 * 4096, 8192, draft=DraftRequest(L8, kv_cache_bytes=4 * GiB))
    assert size(dataclasses.replace(req, draft=None)).tensor_parallel_size == 4
    plan = size(req)
    assert plan.tensor_parallel_size == 8
    assert {evaluate(req, t).draft_weights_bytes for t in (1, 2, 4, 8)} == {L8.weight_bytes_per_gpu(1)}
    assert plan.chosen.need_bytes == evaluate(dataclasses.replace(req, draft=None), 8).need_bytes + (
        L8.weight_bytes_per_gpu(1) + 4 * GiB)


def test_the_draft_kv_uses_the_models_kv_dtype():
    req = SizingRequest(SMOL, H100, 1000, 8192, kv_dtype="fp8_e4m3", draft=DraftRequest(SMOL4))
    assert evaluate(req, 1).draft_kv_budget_bytes == 1000 * 2 * 4 * 3 * 64 * 1


def test_the_draft_is_resolved_from_the_spec_like_the_model():
    def draft_of(speculative, **spec):
        return request_for(LLMDeploymentSpec.model_validate({**spec, "engine": {"speculative": speculative}})).draft

    assert draft_of({"method": "ngram"}) is None
    by_name = draft_of(draft("hf://HuggingFaceTB/SmolLM2-135M-Instruct", draftKvCacheMemoryBytes=MiB)["speculative"])
    assert by_name == DraftRequest(SMOL, MiB)  # the catalog, by the source's name
    declared = {"parameters": SMOL4.parameters, "layers": 4, "attentionHeads": 9, "kvHeads": 3, "headDim": 64,
                "maxContextLength": 8192, "hiddenSize": 576, "intermediateSize": 1536, "vocabSize": 49152,
                "tieWordEmbeddings": True}
    assert draft_of(draft("pvc://drafts/smollm2-4", draftArchitecture=declared)["speculative"]).architecture == SMOL4
    int8 = draft_of(draft("pvc://drafts/smollm2-4", draftArchitecture=declared)["speculative"],
                    model={"quantization": "int8"})
    assert int8.architecture.dtype == "int8"  # the engine quantizes the draft like the model


def test_unknown_draft_names_the_field_to_set():
    with pytest.raises(SizingError) as err:
        request_for(LLMDeploymentSpec.model_validate({"engine": draft("s3://bucket/my-draft")}))
    assert err.value.reason is SizingReason.DRAFT_ARCHITECTURE_UNKNOWN
    assert "spec.engine.speculative.draftArchitecture" in str(err.value) and "s3://bucket/my-draft" in str(err.value)


def test_report_and_status_show_the_draft_terms():
    req = SizingRequest(L70, H100, 100 * 4096, 8192, draft=DraftRequest(L8, kv_cache_bytes=4 * GiB))
    plan = size(req)
    text = render(req, plan)
    for needle in ("draft        8.03B parameters", "4.00 GiB (draftKvCacheMemoryBytes)", "+ draft weights 14.96 GiB",
                   f"draft KV     {plan.draft_kv_blocks} blocks"):  # fmt: skip
        assert needle in text, needle
    status = to_status(plan)
    assert (status.draft_weights_bytes, status.draft_kv_budget_bytes, status.draft_kv_blocks) == (
        L8.weight_bytes_per_gpu(1), 4 * GiB, 4 * GiB // (16 * 128 * 1024))
    assert to_status(size(dataclasses.replace(req, draft=None))).draft_kv_blocks is None
    assert "draft weights" in plan.summary()
