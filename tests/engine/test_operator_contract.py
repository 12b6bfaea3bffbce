"""What the operator renders, the engine honours: a contract test between
`operator/build/engine_config.py` and `llmop.engine`.

The operator turns an LLMDeployment into the engine's config file (`engine_config(spec, name, plan,
sources)`, an `EngineConfig`); the pod runs `llmop serve --config` on that file. This module renders
the config for a spec of the embedded SmolLM2-135M (9 attention heads, 3 KV heads, 30 layers,
head_dim 64) that asks for everything the operator decides: tensor parallelism 3, a bfloat16 KV
cache in blocks of 32 tokens, int8 weights, explicit maxModelLen / maxNumSeqs / maxNumBatchedTokens /
enablePrefixCaching, n-gram speculation, a drain timeout, a port, an admin listener with its credential Secret
and tenancy (a tenants' adapter claim and the adapter manifest). The accelerator is a make-believe 208Mi GPU, so
sizing leaves a KV budget of about 40 MiB per GPU (the engine allocates it per rank, here on the
CPU). The spec has no adapter: int8 weights with a LoRA adapter fail the engine's first step (see
`test_int8_weights_with_an_adapter_generate`), which would take the shared engine down with it.

Only what cannot exist on this host is swapped: `model` (a path inside the pod) becomes the local
embedded GGUF, each adapter's `source` (none here) a local PEFT directory written here,
`admin_token_file` (the mounted Secret) a local file, the tenants' claim in `adapter_roots` a local
directory and `adapter_manifest` (the mounted ConfigMap) a local file naming an adapter there. Every
other field, defaults included (dtype "auto", device "auto", ...), is left as rendered; the file is
written and read back the way `llmop serve --config` reads it.

Then one engine (3 worker processes) is started from it and checked against what the operator
decided, through what the engine exposes: `executor.describe()` (one RankInfo per rank), its KV spec,
block manager and scheduler, requests stepped through it, and the server that `llmop serve` builds
(uvicorn config, drain, admission, HTTP limits), without listening on a socket.

`CONTRACT` has one entry per `EngineConfig` field, saying how that field is observed, so a new
field without an entry fails `test_every_engine_config_field_has_a_contract_entry`. Fields the
operator leaves at their defaults are checked at that default on the rendered engine where it shows,
and with another value on a small probe engine (in-process, TP=1, same model) or a worker-process
probe engine; server fields are checked on the rendered engine's server.

A second spec asks for draft-model speculation (`DRAFT_SPEC`: the same deployment at TP=1 on a
bigger make-believe GPU, `method: draft` with a draft on the model's PVC whose architecture is
declared). Its draft is the embedded model cut after its first 4 layers (`engine/draft_checkpoint.py`,
written here as a HF checkpoint); its rendered file, with the same swaps plus the draft's path, starts
an in-process engine, which must run the draft and hold what sizing counted on the GPU: the target's
KV blocks, the draft's KV blocks, and no more weight bytes than sizing counted for either.

Mismatches found between the two sides are xfail(strict=True) tests whose reason gives the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import inspect
import itertools
import json
import math
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from llmop.engine.block_hash import BlockHasher
from llmop.engine.checkpoint import embedded_model_path
from llmop.engine.config import AdapterSource, EngineConfig
from llmop.engine.device_caps import auto_dtype, resolve_device
from llmop.engine.engine import LLMEngine
from llmop.engine.executor import WorkerFailed
from llmop.engine.model_runner import RankInfo
from llmop.engine.lora import admin
from llmop.engine.lora.peft_adapter import AdapterError
from llmop.engine.lora.registry import AdapterConflict, AdapterState
from llmop.engine.request import FinishReason
from llmop.engine.sampling_params import SamplingParams
from llmop.engine.server import cli
from llmop.engine.server.errors import APIError
from llmop.engine.server.runner import DrainingServer
from llmop.engine.tp.multiproc import MultiprocExecutor
from llmop.operator.api.llmdeployment import LLMDeploymentSpec
from llmop.operator.api.model import ArchitectureSpec
from llmop.operator.build.engine_config import OPERATOR_FIELDS, engine_config
from llmop.operator.build.settings import Settings
from llmop.operator.build.sources import sources_for
from llmop.operator.sizing.architecture import DTYPE_BYTES
from llmop.operator.sizing.catalog import EMBEDDED, lookup
from llmop.operator.sizing.from_spec import plan_for
from llmop.operator.sizing.plan import SizingError, SizingReason

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available() and torch.cuda.device_count() < 3,
    reason="device 'auto' at TP=3 needs three GPUs on a CUDA host (or a CPU-only host)",
)

NAME = "chat"  # the LLMDeployment's metadata.name
SPEC: dict[str, Any] = {
    "model": {"name": "smollm2-chat", "source": "pvc://models/SmolLM2-135M-Instruct", "quantization": "int8"},
    # 0.9 × 208Mi usable - 120 MB weights per GPU (int8 layers ÷ 3, plus the bf16 embedding and the
    # int8 copy of the tied head on every rank) - 32Mi reserve = about 40 MiB of KV per GPU.
    "accelerator": {"memoryPerGPU": "208Mi", "reservedMemory": "32Mi", "gpusPerNode": 4},
    "kvCache": {"concurrency": 2, "contextLength": 1024, "blockSize": 32, "dtype": "bfloat16"},
    "parallelism": {"tensor": 3},
    "engine": {"maxModelLen": 1024, "maxNumSeqs": 4, "maxNumBatchedTokens": 128, "enablePrefixCaching": False,
               "speculative": {"numTokens": 3, "maxBatchSize": 2}, "port": 8081, "drainTimeoutSeconds": 45,
               "adminCredentialSecret": "chat-admin", "adminPort": 8082},
    "tenancy": {"namespaces": ["team-a"], "adapterClaims": ["tenant-adapters"]},
}  # fmt: skip
TENANT_ROOT = "/mnt/pvc/tenant-adapters"  # the tenants' claim, a local directory here
ADMIN_TOKEN = "contract-admin-credential-0123456789"  # the Secret's content, in a local file

# Draft-model speculation: the embedded model's first DRAFT_LAYERS layers, on the model's PVC. The
# catalog does not know it, so the spec declares its architecture: the embedded model's with fewer
# layers, and fewer parameters by the layers cut (each layer's share of what is not the tied
# embedding or the final norm). `test_the_operator_knows_the_draft_it_sizes` checks both.
DRAFT_LAYERS = 4
_SMOL = lookup(EMBEDDED)
_PER_LAYER = (_SMOL.parameters - _SMOL.vocab_size * _SMOL.hidden_size - _SMOL.hidden_size) // _SMOL.layers
DRAFT_ARCHITECTURE = dataclasses.replace(
    _SMOL, layers=DRAFT_LAYERS, parameters=_SMOL.parameters - (_SMOL.layers - DRAFT_LAYERS) * _PER_LAYER)
# TP=1: 0.9 × 448Mi usable - 183 MiB of int8 weights - 95 MiB of the int8 draft's - 32Mi reserve
# leaves about 94 MiB for both KV caches, block for block.
DRAFT_SPEC: dict[str, Any] = {
    **SPEC, "parallelism": {"tensor": 1}, "accelerator": {**SPEC["accelerator"], "memoryPerGPU": "448Mi"},
    "engine": {**SPEC["engine"], "speculative": {
        "method": "draft", "draftModel": f"pvc://models/smollm2-first-{DRAFT_LAYERS}-layers", "numTokens": 3,
        "maxBatchSize": 2, "draftArchitecture": ArchitectureSpec(**{
            k: v for k, v in dataclasses.asdict(DRAFT_ARCHITECTURE).items() if k in ArchitectureSpec.model_fields}).wire()}},
}  # fmt: skip
ADAPTER = {"name": "tone", "source": "pvc://adapters/tone", "pinned": True}  # only where int8 meets LoRA

# The in-process probe: every field the operator leaves at its default, set to something else that
# shows on this host. Its KV budget is a fraction of a fixed "available memory" (patched in).
PROBE_FREE_MEMORY = 1 << 30
PROBE = dict(dtype="bfloat16", device="cpu", seed=1234, kv_cache_memory_bytes=None, kv_cache_memory_fraction=0.05,
             attention_backend="triton",  # Triton's interpreter on the CPU (tests/conftest.py sets TRITON_INTERPRET)
             lora_backend="triton", max_loras=1, max_cpu_loras=2, max_lora_rank=8)
WORKER_TIMEOUT_S = 2.0  # of the worker-process probe

_ids = itertools.count()


def greedy(n: int = 1) -> SamplingParams:
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


def tokens(n: int, start: int = 1000) -> list[int]:
    return list(range(start, start + n))


def run(engine: LLMEngine, prompt: list[int], n: int = 1, adapter: str | None = None):
    """Step one request to its end on an idle engine; its outputs."""
    rid = f"contract-{next(_ids)}"
    engine.add_request(rid, prompt, greedy(n), adapter=adapter)
    outs = []
    while engine.has_unfinished():
        outs += [o for o in engine.step() if o.request_id == rid]
    return outs


def abort_all(engine: LLMEngine, rids) -> None:
    for rid in rids:
        engine.abort(rid)
    assert not engine.has_unfinished()


def at_sizing_dtype(info: RankInfo) -> float:
    """A lower bound of a model's weight bytes at the sizing dtype (bf16): the bytes measured at
    this host's dtype scaled by bf16's share (int8 bytes included, which only lowers the bound)."""
    return info.weight_bytes * DTYPE_BYTES["bfloat16"] / DTYPE_BYTES[info.dtype]


def write_local(rendered: EngineConfig, path: Path, **local) -> Path:
    """The rendered file with pod paths swapped for local ones (`local`: field -> value), nothing else."""
    path.write_text(rendered.model_copy(update=local).to_yaml())
    return path


def read_as_llmop_serve(path: Path) -> EngineConfig:
    """What `llmop serve --config FILE` reads (flags none)."""
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    return cli.load_config(parser.parse_args(["--config", str(path)]))


def make_adapter(path: Path, rank: int, seed: int, std: float = 0.1) -> Path:
    """A PEFT LoRA directory for SmolLM2-135M (q_proj and v_proj, random non-zero A and B)."""
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    for layer in range(30):
        for module, out in (("q_proj", 576), ("v_proj", 192)):
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            weights[f"{prefix}.lora_A.weight"] = torch.randn(rank, 576, generator=gen) * std
            weights[f"{prefix}.lora_B.weight"] = torch.randn(out, rank, generator=gen) * std
    save_file(weights, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": ["q_proj", "v_proj"],
        "bias": "none"}))
    return path


# --- the operator's side ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spec() -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate(SPEC)


@pytest.fixture(scope="module")
def plan(spec):
    return plan_for(spec)


@pytest.fixture(scope="module")
def rendered(spec, plan) -> EngineConfig:
    """The EngineConfig the operator writes into the ConfigMap."""
    return engine_config(spec, NAME, plan, sources_for(spec, Settings(engine_image="engine:test")))


@pytest.fixture(scope="module")
def adapter_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {"tone": make_adapter(root / "tone", 8, 1), "b": make_adapter(root / "b", 4, 2),
            "c": make_adapter(root / "c", 4, 3), "r16": make_adapter(root / "r16", 16, 4)}


@pytest.fixture(scope="module")
def admin_token_file(tmp_path_factory) -> Path:
    """The admin credential Secret's file, here."""
    token = tmp_path_factory.mktemp("admin-secret") / "token"
    token.write_text(ADMIN_TOKEN)
    return token


@pytest.fixture(scope="module")
def tenant_manifest(tmp_path_factory) -> Path:
    """The adapter manifest the operator's placement writes (its own builder, with the confinement
    of a PerNamespace claim layout), naming a tenant's adapter on the tenants' claim (a local
    directory standing for TENANT_ROOT)."""
    from llmop.operator.adapters.binding import ManifestEntry
    from llmop.operator.build.meta import Owner
    from llmop.operator.build.tenancy import MANIFEST_FILE, manifest_config_map

    claim = tmp_path_factory.mktemp("tenant-claim")
    make_adapter(claim / "team-a" / "summarizer", 4, 5)
    entry = ManifestEntry("team-a/summarizer", str(claim / "team-a" / "summarizer"), root=str(claim / "team-a"))
    owner = Owner("chat", "ml", "uid-1")
    manifest = tmp_path_factory.mktemp("etc-llmop-adapters") / "adapters.json"
    manifest.write_text(manifest_config_map(owner, [entry.wire()])["data"][MANIFEST_FILE])
    return manifest


@pytest.fixture(scope="module")
def config_file(rendered, adapter_dirs, admin_token_file, tenant_manifest, tmp_path_factory) -> Path:
    """The rendered file with pod paths swapped for local ones (model, adapter sources, the admin
    credential, the tenants' claim and the adapter manifest), nothing else."""
    claim = str(json.loads(tenant_manifest.read_text())["adapters"][0]["source"]).rsplit("/", 2)[0]
    return write_local(
        rendered, tmp_path_factory.mktemp("etc-llmop") / "engine.yaml", model=str(embedded_model_path()),
        admin_token_file=str(admin_token_file), adapter_manifest=str(tenant_manifest),
        adapter_roots=[claim if r == TENANT_ROOT else r for r in rendered.adapter_roots],
        adapters=[a.model_copy(update={"source": str(adapter_dirs[a.name])}) for a in rendered.adapters])


@pytest.fixture(scope="module")
def config(config_file) -> EngineConfig:
    return read_as_llmop_serve(config_file)


# --- the engine's side --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(config):
    """The engine of the rendered config: 3 worker processes (TP=3)."""
    eng = LLMEngine(config)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def ranks(engine):
    return engine.executor.describe()


@pytest.fixture(scope="module")
def probe(adapter_dirs):
    """In-process TP=1 engine on the same model with the non-rendered fields changed (PROBE)."""
    config = EngineConfig(model=str(embedded_model_path()), **PROBE,
                          adapters=[AdapterSource(name="p", source=str(adapter_dirs["tone"]), pinned=True)])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("llmop.engine.model_runner.available_memory", lambda device: PROBE_FREE_MEMORY)
        eng = LLMEngine(config)
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def worker_probe():
    """TP=1 in a worker process, with a short worker timeout. `ranks` is read at start, because
    the worker_timeout_s check ends this engine."""
    eng = LLMEngine(EngineConfig(model=str(embedded_model_path()), worker_processes=True,
                                 worker_timeout_s=WORKER_TIMEOUT_S, kv_cache_memory_bytes=4 << 20))
    eng.ranks = eng.executor.describe()
    yield eng
    eng.shutdown()


@dataclass
class Served:
    """What `llmop serve` built around the engine: the config it read, the app, the uvicorn server."""

    config: EngineConfig
    app: Any
    server: DrainingServer
    exit_code: int
    bound: tuple = ()  # (host, port) of each socket it listened on

    @property
    def state(self):
        return self.app.state.llmop


@pytest.fixture
def serve(engine, config_file, monkeypatch):
    """Runs `llmop serve --config FILE` (cli.run) up to where uvicorn would listen: the engine it
    starts is the module's engine, and the server is captured instead of run."""

    def go() -> Served:
        seen: dict[str, Any] = {}

        class Borrowed:  # LLMEngine(config): the module's engine, which outlives this server
            def __init__(self, config):
                seen["config"] = config

            def __getattr__(self, name):
                return getattr(engine, name)

            def shutdown(self):
                seen["shutdown"] = True

        def capture(server, sockets=None):
            seen["server"] = server
            seen["bound"] = tuple(s.getsockname()[:2] for s in sockets or ())

        monkeypatch.setattr("llmop.engine.engine.LLMEngine", Borrowed)
        monkeypatch.setattr(DrainingServer, "run", capture)
        parser = argparse.ArgumentParser()
        cli.configure(parser)
        code = cli.run(parser.parse_args(["--config", str(config_file), "--log-level", "warning"]))
        assert seen.get("shutdown"), "llmop serve must stop the engine when the server exits"
        return Served(seen["config"], seen["server"].config.app, seen["server"], code, seen["bound"])

    return go


@contextlib.contextmanager
def running(served: Served):
    """The server's engine loop, as the app's lifespan starts it (no socket)."""
    served.state.engine.start()
    try:
        yield served.state
    finally:
        served.state.engine.shutdown()


def http(served: Served, port: int | None = None, token: str | None = None):
    """A client of the served app (no `with`: no lifespan), as if connected to local `port`."""
    from fastapi.testclient import TestClient

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    base = f"http://testserver:{port}" if port else "http://testserver"
    return TestClient(served.app, base_url=base, headers=headers, raise_server_exceptions=False)


# --- the rendered config ------------------------------------------------------------------------------


def test_the_operator_renders_what_the_spec_asks(rendered, plan, config):
    assert plan.tensor_parallel_size == 3
    assert (rendered.tensor_parallel_size, rendered.kv_cache_dtype, rendered.block_size, rendered.quantization) == (
        3, "bfloat16", 32, "int8")
    assert (rendered.max_model_len, rendered.max_num_seqs, rendered.max_num_batched_tokens) == (1024, 4, 128)
    assert rendered.enable_prefix_caching is False
    assert (rendered.speculative.method, rendered.speculative.num_tokens, rendered.speculative.max_batch_size) == (
        "ngram", 3, 2)
    assert (rendered.host, rendered.port, rendered.drain_timeout_s) == ("0.0.0.0", 8081, 45.0)
    assert rendered.served_model_name == "smollm2-chat"
    assert rendered.model == "/mnt/pvc/models/SmolLM2-135M-Instruct"
    assert rendered.adapters == []
    assert rendered.kv_cache_memory_bytes == plan.kv_cache_bytes_per_gpu
    assert 16 << 20 < rendered.kv_cache_memory_bytes < 64 << 20  # a few tens of MiB per rank on this host
    # It sets exactly the fields it claims, except the fraction, which it only reserves (the byte
    # budget it sets makes the engine ignore the fraction); the others stay at the engine's defaults.
    assert set(OPERATOR_FIELDS) <= set(EngineConfig.model_fields)
    assert set(OPERATOR_FIELDS) - rendered.model_fields_set == {"kv_cache_memory_fraction"}
    others = set(EngineConfig.model_fields) - set(OPERATOR_FIELDS)
    assert rendered.model_dump(include=others) == EngineConfig().model_dump(include=others)
    # The file the engine starts from differs from the rendered one only in the swapped local paths.
    local = {"model", "adapters", "admin_token_file", "adapter_manifest", "adapter_roots"}
    assert config.model_dump(exclude=local) == rendered.model_dump(exclude=local)
    assert [(a.name, a.pinned) for a in config.adapters] == [(a.name, a.pinned) for a in rendered.adapters]


def test_llmop_serve_starts_the_engine_from_the_rendered_file(serve, config):
    served = serve()
    assert served.config == config
    assert served.state.config == config
    assert served.exit_code == 0


def test_the_operator_knows_the_checkpoint_it_sizes(engine, plan):
    """The catalog entry sizing used is the served checkpoint's architecture (its parameter count
    summed from the GGUF's tensors)."""
    import gguf

    arch, mcfg = lookup(EMBEDDED), engine.checkpoint.config
    assert plan.request.architecture.layers == arch.layers  # found by the source's name
    assert (arch.layers, arch.attention_heads, arch.kv_heads, arch.head_dim) == (
        mcfg.num_layers, mcfg.num_heads, mcfg.num_kv_heads, mcfg.head_dim) == (30, 9, 3, 64)
    assert arch.max_context_length == mcfg.max_position_embeddings
    assert arch.parameters == sum(int(t.n_elements) for t in gguf.GGUFReader(str(engine.checkpoint.path)).tensors)


def test_the_engine_has_the_kv_blocks_per_gpu_the_operator_planned(engine, ranks, plan):
    """`plan.kv_blocks` (status.sizing.kvBlocks) is what each rank holds; so are the bytes per block
    and the sequences of maxModelLen tokens that fit."""
    assert engine.kv_spec.num_blocks == plan.kv_blocks > 100
    assert all(r.num_blocks == plan.kv_blocks for r in ranks)
    assert engine.kv_spec.bytes_per_block == plan.request.block_size * plan.kv_bytes_per_token_per_gpu
    assert engine.kv_spec.num_tokens == plan.kv_capacity_tokens
    assert engine.kv_spec.max_concurrent_seqs(engine.max_model_len) == plan.max_concurrent_sequences


def test_a_rank_holds_no_more_weights_than_sizing_counted(ranks, plan):
    assert max(at_sizing_dtype(r) for r in ranks) <= plan.chosen.weights_bytes


def test_a_size_that_cannot_split_the_heads_is_refused_by_both():
    bad = LLMDeploymentSpec.model_validate({**SPEC, "parallelism": {"tensor": 2}})
    with pytest.raises(SizingError) as refused:
        plan_for(bad)
    assert refused.value.reason is SizingReason.TENSOR_PARALLEL_INVALID
    assert "does not divide the 9 attention heads" in str(refused.value)
    with pytest.raises(ValueError, match=r"9 attention heads, 3 KV heads"):
        LLMEngine(EngineConfig(model=str(embedded_model_path()), tensor_parallel_size=2))


def test_sizing_and_the_engine_accept_the_same_tensor_parallel_sizes():
    """For every size up to the head count: sizing accepts it (memory aside) exactly when the engine
    can split the model (9 divides the heads and is a multiple of the KV heads, not the MLP width)."""
    from llmop.engine.checkpoint import open_checkpoint
    from llmop.engine.tp.shard import valid_tensor_parallel_sizes
    from llmop.operator.sizing.plan import Rejection, evaluate

    engine_sizes = valid_tensor_parallel_sizes(open_checkpoint(str(embedded_model_path())).config)
    big = LLMDeploymentSpec.model_validate({**SPEC, "accelerator": {**SPEC["accelerator"], "gpusPerNode": 16}})
    req = plan_for(big).request
    sizing_sizes = [t for t in range(1, 10) if evaluate(req, t).rejection in (None, Rejection.MEMORY)]
    assert sizing_sizes == engine_sizes == [1, 3]
    nine = LLMDeploymentSpec.model_validate({**big.model_dump(by_alias=True), "parallelism": {"tensor": 9}})
    with pytest.raises(SizingError, match="does not divide the MLP width 1536"):
        plan_for(nine)


def test_int8_weights_with_an_adapter_generate(adapter_dirs):
    spec = LLMDeploymentSpec.model_validate({
        **SPEC, "parallelism": {"tensor": 1}, "adapters": [ADAPTER],
        "accelerator": {**SPEC["accelerator"], "memoryPerGPU": "320Mi"}})
    plan = plan_for(spec)
    rendered = engine_config(spec, NAME, plan, sources_for(spec, Settings()))
    assert (rendered.quantization, [(a.name, a.source, a.pinned) for a in rendered.adapters]) == (
        "int8", [("tone", "/mnt/pvc/adapters/tone", True)])
    eng = LLMEngine(rendered.model_copy(update={
        "model": str(embedded_model_path()),
        "adapters": [a.model_copy(update={"source": str(adapter_dirs[a.name])}) for a in rendered.adapters]}))
    try:
        base = [t for o in run(eng, tokens(12, 6000), 4) for t in o.new_token_ids]
        tuned = [t for o in run(eng, tokens(12, 6000), 4, adapter="tone") for t in o.new_token_ids]
    finally:
        eng.shutdown()
    assert len(base) == len(tuned) == 4 and base != tuned


def test_fp16_weights_on_a_cpu_accelerator_run_as_sized():
    """quantization fp16 on `accelerator.type: cpu`: rendered with fp32 KV (the activations' dtype),
    the engine computes in fp32 whatever `auto` would pick, holds at most the weight bytes sizing
    counted (fp16 layers, fp32 embedding) and exactly the KV blocks planned."""
    spec = LLMDeploymentSpec.model_validate({
        **SPEC, "model": {**SPEC["model"], "quantization": "fp16"}, "parallelism": {"tensor": 1},
        "accelerator": {**SPEC["accelerator"], "type": "cpu", "memoryPerGPU": "640Mi"},
        "kvCache": {k: v for k, v in SPEC["kvCache"].items() if k != "dtype"}})
    plan = plan_for(spec)
    rendered = engine_config(spec, NAME, plan, sources_for(spec, Settings()))
    assert (rendered.quantization, rendered.kv_cache_dtype, rendered.dtype, rendered.device) == (
        "fp16", "float32", "auto", "cpu")
    eng = LLMEngine(rendered.model_copy(update={"model": str(embedded_model_path())}))
    try:
        (rank,) = eng.executor.describe()
        assert (rank.dtype, eng.kv_spec.num_blocks) == ("float32", plan.kv_blocks)
        assert 0.9 * plan.chosen.weights_bytes <= rank.weight_bytes <= plan.chosen.weights_bytes
        assert len([t for o in run(eng, tokens(12, 6000), 4) for t in o.new_token_ids]) == 4
    finally:
        eng.shutdown()
    with pytest.raises(ValueError, match="runs on the CPU only"):
        LLMDeploymentSpec.model_validate({**SPEC, "model": {**SPEC["model"], "quantization": "fp16"}})


@pytest.mark.parametrize("quantization,cpu,threads,resolved", [
    ("auto", "no_bf16", 1, ("float32", "fp16")), ("auto", "no_bf16", 2, ("float32", "fp16")),
    ("auto", "bf16", 2, ("float32", "fp16")), ("auto", "amx", 1, ("bfloat16", "none")),
    ("none", "no_bf16", 1, ("float32", "none")), ("none", "bf16", 1, ("bfloat16", "none")),
    ("int8", "no_bf16", 1, ("float32", "int8"))])
def test_the_engines_choice_on_a_cpu_accelerator_runs_as_sized(quantization, cpu, threads, resolved, monkeypatch):
    """`accelerator.type: cpu` with no pinned dtype: the engine picks its float dtype by the CPU it
    finds, and `quantization: auto` (the default) its weights by the CPU too (made to find each kind
    here: fp16 weights over fp32 activations without AMX, on one thread or two, bf16 with AMX);
    `none` and `int8` compute in fp32 without BF16, `none` in bf16 with it. Rendered with the KV
    dtype sizing counted, the engine holds no more weight bytes than sizing counted each way, and
    exactly the KV blocks planned."""
    from llmop.engine.device_caps import CpuFeatures

    monkeypatch.setattr("llmop.engine.device_caps.cpu_features",
                        lambda: CpuFeatures(cpu in ("bf16", "amx"), cpu == "amx", False))
    monkeypatch.setattr("llmop.engine.device_caps.fbgemm_fp16_available", lambda: True)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)  # 1: as `llmop serve` runs on a 2-core node; 2: the all-threads fp16 op
    try:
        _on_a_cpu_accelerator(quantization, resolved)
    finally:
        torch.set_num_threads(before)


def _on_a_cpu_accelerator(quantization: str, resolved: tuple[str, str]) -> None:
    spec = LLMDeploymentSpec.model_validate({
        **SPEC, "model": {**SPEC["model"], "quantization": quantization},
        "parallelism": {"tensor": 1}, "accelerator": {**SPEC["accelerator"], "type": "cpu", "memoryPerGPU": "800Mi"},
        "kvCache": {k: v for k, v in SPEC["kvCache"].items() if k != "dtype"}})
    plan = plan_for(spec)
    rendered = engine_config(spec, NAME, plan, sources_for(spec, Settings()))
    assert (rendered.quantization, rendered.kv_cache_dtype, rendered.device) == (quantization, "bfloat16", "cpu")
    eng = LLMEngine(rendered.model_copy(update={"model": str(embedded_model_path())}))
    try:
        (rank,) = eng.executor.describe()
        assert (rank.dtype, eng.config.quantization) == resolved
        assert (rank.kv_dtype, eng.kv_spec.num_blocks) == ("bfloat16", plan.kv_blocks)
        assert rank.weight_bytes <= plan.chosen.weights_bytes
        assert len([t for o in run(eng, tokens(12, 6000), 4) for t in o.new_token_ids]) == 4
    finally:
        eng.shutdown()


# --- method draft: the draft model in the pod and on the GPU ---------------------------------------------


@pytest.fixture(scope="module")
def draft_spec() -> LLMDeploymentSpec:
    return LLMDeploymentSpec.model_validate(DRAFT_SPEC)


@pytest.fixture(scope="module")
def draft_plan(draft_spec):
    return plan_for(draft_spec)


@pytest.fixture(scope="module")
def draft_rendered(draft_spec, draft_plan) -> EngineConfig:
    return engine_config(draft_spec, NAME, draft_plan, sources_for(draft_spec, Settings(engine_image="engine:test")))


@pytest.fixture(scope="module")
def draft_dir(hf_checkpoint_dir, tmp_path_factory) -> Path:
    """The draft checkpoint the PVC would hold: the embedded model's first DRAFT_LAYERS layers."""
    from llmop.engine.draft_checkpoint import truncate_checkpoint

    return truncate_checkpoint(hf_checkpoint_dir, DRAFT_LAYERS, tmp_path_factory.mktemp("pvc") / "draft")


@pytest.fixture(scope="module")
def draft_engine(draft_rendered, draft_dir, admin_token_file, tmp_path_factory):
    """The engine `llmop serve` starts from the draft spec's file (in-process: TP=1)."""
    path = write_local(
        draft_rendered, tmp_path_factory.mktemp("etc-llmop-draft") / "engine.yaml", model=str(embedded_model_path()),
        admin_token_file=str(admin_token_file),
        speculative=draft_rendered.speculative.model_copy(update={"draft_model": str(draft_dir)}))
    eng = LLMEngine(read_as_llmop_serve(path))
    yield eng
    eng.shutdown()


def test_a_draft_spec_renders_the_drafts_path_in_the_pod(draft_rendered, draft_plan, rendered):
    spec = draft_rendered.speculative
    assert (spec.method, spec.num_tokens, spec.max_batch_size) == ("draft", 3, 2)
    assert spec.draft_model == f"/mnt/pvc/models/smollm2-first-{DRAFT_LAYERS}-layers"  # the model's claim
    assert spec.draft_kv_cache_memory_bytes is None  # the engine's default: as many blocks as the model's
    assert draft_rendered.adapter_roots == rendered.adapter_roots == ["/mnt/pvc/models", TENANT_ROOT]  # no new claim
    assert draft_rendered.kv_cache_memory_bytes == draft_plan.kv_cache_bytes_per_gpu
    assert draft_plan.tensor_parallel_size == 1 and draft_plan.request.draft.architecture.dtype == "int8"


def test_the_engine_runs_the_rendered_draft(draft_engine):
    """The draft proposes (its own 4 layers, its own KV cache) and the target verifies."""
    proposer = draft_engine.speculator.proposer
    assert proposer.runner.full_config.num_layers == DRAFT_LAYERS and proposer.runner.int8_layers > 0
    steps = [len(o.new_token_ids) for o in run(draft_engine, tokens(6, 8000) * 4, 8)]
    assert sum(steps) == 8 and draft_engine.speculator.counters.draft_tokens > 0
    assert proposer.blocks.pool.num_free == proposer.blocks.pool.num_blocks  # released with the request


def test_the_engine_holds_on_the_gpu_what_sizing_counted_for_the_draft(draft_engine, draft_plan):
    """Both caches have the blocks sizing split the memory into, at the bytes per block it counted;
    neither model holds more weight bytes than it counted; so the whole holds within the usable
    memory of the GPU."""
    target, draft = draft_engine.executor.describe()[0], draft_engine.speculator.proposer.runner.describe()
    req, c = draft_plan.request, draft_plan.chosen
    assert target.num_blocks == draft_plan.kv_blocks > 100
    assert draft.num_blocks == draft_plan.draft_kv_blocks == draft_plan.kv_blocks
    assert draft.kv_dtype == target.kv_dtype == req.resolved_kv_dtype
    assert draft.kv_bytes == draft.num_blocks * req.block_size * req.draft.kv_bytes_per_token(req.resolved_kv_dtype)
    assert at_sizing_dtype(target) <= c.weights_bytes
    assert at_sizing_dtype(draft) <= c.draft_weights_bytes
    held = at_sizing_dtype(target) + at_sizing_dtype(draft) + target.kv_bytes + draft.kv_bytes
    assert held + c.reserved_bytes <= c.usable_bytes


def test_the_operator_knows_the_draft_it_sizes(draft_engine, draft_plan, draft_dir):
    """The declared draftArchitecture is the draft checkpoint's (its parameter count summed from
    its safetensors)."""
    from safetensors import safe_open

    arch, m = draft_plan.request.draft.architecture, draft_engine.speculator.proposer.runner.full_config
    assert (arch.layers, arch.attention_heads, arch.kv_heads, arch.head_dim, arch.vocab_size) == (
        m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim, m.vocab_size)
    assert arch.max_context_length == m.max_position_embeddings
    with safe_open(str(draft_dir / "model.safetensors"), "pt") as f:
        assert arch.parameters == sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


# --- the contract, field by field ----------------------------------------------------------------------
# Each checker names the fixtures it needs; the rendered engine is `engine` (its RankInfos: `ranks`).


def check_model(engine, config, plan):
    """The engine opened the file it was given, and its architecture is the one sizing used."""
    assert engine.checkpoint.path == Path(config.model)
    a, m = plan.request.architecture, engine.checkpoint.config
    assert (a.layers, a.attention_heads, a.kv_heads, a.head_dim) == (m.num_layers, m.num_heads, m.num_kv_heads,
                                                                     m.head_dim)


def check_served_model_name(engine, rendered, serve):
    """Clients name the model by the rendered name: the engine's name, /v1/models, request routing."""
    assert engine.model_name == rendered.served_model_name
    served = serve()
    assert http(served).get("/v1/models").json()["data"][0]["id"] == rendered.served_model_name
    assert served.state.resolve_model(rendered.served_model_name).adapter is None
    with pytest.raises(APIError) as unknown:
        served.state.resolve_model("smollm2-other")
    assert unknown.value.status == 404


def check_dtype(ranks, probe):
    """"auto" (rendered): every rank computes in auto's dtype for its device; the probe's bfloat16
    differs from auto on this host."""
    expected = str(auto_dtype(resolve_device("auto"))[0]).removeprefix("torch.")
    assert [r.dtype for r in ranks] == [expected] * 3
    assert [r.dtype for r in probe.executor.describe()] == ["bfloat16"]


def check_quantization(ranks, probe):
    """int8: every rank replaced its linear layers with int8 ones (the same count on each); the
    probe, without quantization, has none."""
    assert ranks[0].int8_layers > 0 and len({r.int8_layers for r in ranks}) == 1
    assert probe.executor.describe()[0].int8_layers == 0


def check_device(ranks, probe):
    """"auto": one GPU per rank on CUDA, the CPU otherwise; the probe's explicit "cpu"."""
    cuda = torch.cuda.is_available()
    assert [r.device for r in ranks] == [f"cuda:{i}" if cuda else "cpu" for i in range(3)]
    assert probe.executor.describe()[0].device == "cpu"


def check_tensor_parallel_size(engine, ranks):
    """3 ranks in 3 processes, 3 of the 9 attention heads and 1 of the 3 KV heads each."""
    assert [r.rank for r in ranks] == [0, 1, 2]
    assert len({r.pid for r in ranks} - {os.getpid()}) == 3
    assert [(r.num_heads, r.num_kv_heads) for r in ranks] == [(3, 1)] * 3
    assert engine.checkpoint.config.num_heads == 9 and engine.checkpoint.config.num_kv_heads == 3


def check_worker_processes(engine, ranks, probe, worker_probe):
    """False (rendered) at TP=3: worker processes anyway (always above 1); False at TP=1 (probe):
    the rank runs in this process; True at TP=1: in a worker process."""
    assert isinstance(engine.executor, MultiprocExecutor) and os.getpid() not in {r.pid for r in ranks}
    assert probe.executor.describe()[0].pid == os.getpid()
    assert isinstance(worker_probe.executor, MultiprocExecutor)
    assert [r.pid for r in worker_probe.ranks] == [worker_probe.executor.procs[0].pid] != [os.getpid()]


def check_worker_timeout_s(engine, rendered, worker_probe):
    """The rendered engine waits worker_timeout_s for a rank; a rank that stops answering fails the
    probe engine after its worker_timeout_s (the worker process is stopped with SIGSTOP)."""
    assert engine.executor.timeout == rendered.worker_timeout_s
    pid = worker_probe.executor.procs[0].pid
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        with pytest.raises(WorkerFailed, match=rf"did not answer describe within {WORKER_TIMEOUT_S:.0f} s"):
            worker_probe.executor.describe()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    assert WORKER_TIMEOUT_S <= time.monotonic() - t0 < WORKER_TIMEOUT_S + 10
    assert worker_probe.failure is not None


def check_seed(probe):
    """The sampling rank's generator (unseeded requests draw from it) starts from the seed."""
    assert probe.executor.runner.generator.initial_seed() == PROBE["seed"]


def check_max_model_len(engine, rendered, serve):
    """A request may use max_model_len tokens, not one more; /v1/models reports it."""
    limit = rendered.max_model_len
    assert engine.max_model_len == limit
    with pytest.raises(ValueError, match=rf"exceeds max_model_len {limit} by 1"):
        engine.add_request("too-long", tokens(limit - 4), greedy(5))
    engine.add_request("fits", tokens(limit - 4), greedy(4))
    abort_all(engine, ["fits"])
    assert http(serve()).get("/v1/models").json()["data"][0]["max_model_len"] == limit


def check_max_num_seqs(engine, rendered):
    """Six waiting requests: one step runs max_num_seqs (4) of them."""
    rids = [f"seqs-{i}" for i in range(6)]
    for i, rid in enumerate(rids):
        engine.add_request(rid, tokens(5, 2000 + 10 * i), greedy(2))
    engine.step()
    assert len(engine.last_batch.query_lens) == len(engine.scheduler.running) == rendered.max_num_seqs
    abort_all(engine, rids)


def check_max_num_batched_tokens(engine, rendered):
    """A 300-token prompt is prefilled in chunks of max_num_batched_tokens (128)."""
    engine.add_request("chunked", tokens(300), greedy(1))
    engine.step()
    assert len(engine.last_batch.input_ids) == rendered.max_num_batched_tokens
    engine.step()
    assert engine.last_batch.positions[0] == rendered.max_num_batched_tokens
    abort_all(engine, ["chunked"])


def check_block_size(engine, rendered):
    """Blocks of 32 tokens: a 70-token prompt takes 3 blocks; token 32 is slot 0 of its second block."""
    bs = rendered.block_size
    assert engine.kv_spec.block_size == engine.blocks.block_size == bs
    engine.add_request("blocks", tokens(70), greedy(2))
    engine.step()
    batch, table = engine.last_batch, engine.blocks.tables["blocks"]
    assert batch.block_size == bs and len(table) == 3 and batch.block_tables[0] == tuple(table)
    assert batch.slot_mapping[bs] == table[1] * bs and batch.slot_mapping[69] == table[2] * bs + 69 - 2 * bs
    abort_all(engine, ["blocks"])


def check_kv_cache_dtype(ranks, engine, probe):
    """Every rank stores its KV cache in bfloat16 (here unlike the fp32 weights): 2 bytes per value
    of 30 layers × K and V × 1 KV head × 64 × 32 tokens per block. The probe's "auto" follows its
    model dtype."""
    assert [r.kv_dtype for r in ranks] == ["bfloat16"] * 3
    assert all(r.kv_bytes == r.num_blocks * 30 * 2 * 1 * 64 * 32 * 2 for r in ranks)
    assert engine.kv_spec.bytes_per_block == 30 * 2 * 1 * 64 * 32 * 2
    assert probe.executor.describe()[0].kv_dtype == probe.executor.describe()[0].dtype


def check_kv_cache_memory_bytes(engine, ranks, rendered):
    """Each rank's KV cache is as many whole blocks as fit in the byte budget."""
    budget, per_block = rendered.kv_cache_memory_bytes, engine.kv_spec.bytes_per_block
    assert engine.kv_spec.num_blocks == budget // per_block
    assert all(budget - per_block < r.kv_bytes <= budget for r in ranks)


def check_kv_cache_memory_fraction(probe):
    """Without a byte budget, the probe's KV cache is the fraction of the available memory (patched
    to PROBE_FREE_MEMORY). (The rendered engine has a byte budget, which overrides the fraction.)"""
    per_block = probe.kv_spec.bytes_per_block
    assert probe.kv_spec.num_blocks == int(PROBE["kv_cache_memory_fraction"] * PROBE_FREE_MEMORY) // per_block


def check_enable_prefix_caching(engine, probe):
    """Off (rendered): the same prompt twice computes it twice. On (the probe's default): the second
    request starts after the cached full blocks."""
    assert engine.blocks.enable_caching is False
    prompt = tokens(70, 3000)
    assert run(engine, prompt)[-1].num_cached_tokens == 0
    assert run(engine, prompt)[-1].num_cached_tokens == 0
    prompt = tokens(20, 3000)
    assert run(probe, prompt)[-1].num_cached_tokens == 0
    assert run(probe, prompt)[-1].num_cached_tokens == 16  # one full block of 16


def check_prefix_caching_hash(probe):
    """sha256 (default): the probe's cache names a computed prompt's blocks by sha256 chains."""
    prompt = tokens(40, 4000)
    run(probe, prompt)
    names: list[bytes] = []
    hasher = BlockHasher(probe.blocks.block_size, lambda data: hashlib.sha256(data).digest())
    hasher.extend(names, hasher.root(), prompt)
    assert len(names) == 2 and all(n in probe.blocks.pool.cached for n in names)


def check_attention_backend(probe):
    """The probe's "triton" is the attention ops its rank runs (its steps above ran them)."""
    assert probe.executor.runner.backend.ops.name == "triton"


def check_lora_backend(probe):
    """The probe's "triton" is the LoRA ops its rank built when the pinned adapter was written into
    its slot (at the first step)."""
    run(probe, tokens(3, 5000))
    assert probe.executor.runner.lora.state.ops.name == "triton"


def check_max_loras(engine, rendered, probe, adapter_dirs):
    """Adapter slots: the rendered engine has max_loras of them; the probe's one slot holds its
    pinned adapter, so pinning another is refused."""
    assert engine.lora.registry.max_slots == rendered.max_loras
    with pytest.raises(AdapterConflict, match=r"all 1 slots are pinned"):
        probe.lora.add("pin-2", str(adapter_dirs["b"]), pinned=True)


def check_max_cpu_loras(engine, rendered, probe, adapter_dirs):
    """Host copies: the probe keeps 2 (its pinned one and the newest); the older one goes to disk."""
    assert engine.lora.registry.max_host == rendered.max_cpu_loras
    probe.lora.add("b", str(adapter_dirs["b"]))
    assert probe.lora.registry.state("b") is AdapterState.CPU
    probe.lora.add("c", str(adapter_dirs["c"]))
    assert (probe.lora.registry.state("b"), probe.lora.registry.state("c")) == (AdapterState.DISK, AdapterState.CPU)
    probe.lora.remove("b")
    probe.lora.remove("c")


def check_max_lora_rank(engine, rendered, probe, adapter_dirs):
    """The rendered engine (64) reads a rank-16 adapter; the probe (max_lora_rank 8) refuses it."""
    assert rendered.max_lora_rank == 64 and engine.lora.read("r16", str(adapter_dirs["r16"])).rank == 16
    with pytest.raises(AdapterError, match=r"rank 16 exceeds max_lora_rank 8"):
        probe.lora.add("r16", str(adapter_dirs["r16"]))
    probe.lora.remove("r16")


def check_adapters(engine, rendered, probe, adapter_dirs, serve):
    """None rendered: the engine registers none and /v1/models lists the base model only. The
    probe's pinned adapter is registered from its source and resident in a slot."""
    assert rendered.adapters == [] and engine.lora.infos() == []
    assert [m["id"] for m in http(serve()).get("/v1/models").json()["data"]] == [rendered.served_model_name]
    (info,) = [i for i in probe.lora.infos() if i.name == "p"]
    assert (info.source, info.pinned, info.state) == (str(adapter_dirs["tone"]), True, AdapterState.RESIDENT)


def check_host(rendered, serve):
    """uvicorn is configured to listen on the rendered host."""
    assert serve().server.config.host == rendered.host == "0.0.0.0"


def check_port(rendered, serve):
    """... and port."""
    assert serve().server.config.port == rendered.port == 8081


def check_max_waiting_requests(rendered, serve):
    """Admission takes max_waiting_requests queued engine requests, then answers 429."""
    with running(serve()) as state:
        ticket = state.admit(rendered.max_waiting_requests)
        try:
            with pytest.raises(APIError) as full:
                state.admit(1)
            assert full.value.status == 429 and full.value.code == "queue_full"
        finally:
            ticket.close()


def check_queue_timeout_s(engine, rendered, serve):
    """A request that has waited longer than queue_timeout_s ends with "queue_timeout" before it
    runs; one a second younger than the limit runs."""
    served = serve()
    limit = rendered.queue_timeout_s

    async def last(rid, waited):
        out = None
        async for out in served.state.engine.generate(rid, tokens(5, 7000), greedy(1),
                                                      arrival_time=time.monotonic() - waited):
            pass
        return out

    with running(served):
        late = asyncio.run(last("late", limit + 1))
        young = asyncio.run(last("young", limit - 1))
    assert (late.error, late.num_output_tokens) == ("queue_timeout", 0)
    assert young.error is None and young.finish_reason is FinishReason.LENGTH and young.num_output_tokens == 1
    assert not engine.has_unfinished()


def check_max_prompt_tokens(engine, rendered, serve):
    """None (rendered): prompts up to max_model_len tokens; one more is a 400 naming that limit."""
    assert rendered.max_prompt_tokens is None
    served = serve()
    with running(served):
        r = http(served).post("/v1/completions", json={"model": rendered.served_model_name, "max_tokens": 1,
                                                        "prompt": tokens(engine.max_model_len + 1)})
    assert r.status_code == 400, r.text
    assert f"more than the limit of {engine.max_model_len} by 1" in r.json()["error"]["message"]


def check_max_request_body_bytes(rendered, serve):
    """A body one byte over the limit is refused with 413 before anything parses it; one at the
    limit is not."""
    client, limit = http(serve()), rendered.max_request_body_bytes
    headers = {"content-type": "application/json"}
    assert client.post("/v1/completions", content=b" " * (limit + 1), headers=headers).status_code == 413
    assert client.post("/v1/completions", content=b" " * limit, headers=headers).status_code != 413


def check_drain_timeout_s(rendered, serve):
    """On SIGTERM the server drains for drain_timeout_s, then exits."""
    served = serve()
    assert served.server.drain_timeout_s == rendered.drain_timeout_s == 45.0
    waited = []

    async def drain(timeout_s):
        waited.append(timeout_s)
        return True

    served.state.drain = drain
    asyncio.run(served.server._drain())
    assert waited == [45.0] and served.server.should_exit


def check_admin_port(rendered, serve):
    """The admin API listens on admin_port, and only there: adapter routes on the inference port
    are 404/405."""
    served = serve()
    assert rendered.admin_port == 8082 and ("0.0.0.0", 8082) in served.bound
    with running(served):  # the listing is read on the engine thread
        assert http(served, 8081, ADMIN_TOKEN).get("/v1/adapters").status_code in (404, 405)
        assert http(served, 8082, ADMIN_TOKEN).get("/v1/adapters").status_code == 200


def check_admin_host(rendered, serve):
    """... on admin_host (the operator's 0.0.0.0: the operator calls it from its own pod)."""
    assert rendered.admin_host == "0.0.0.0" and ("0.0.0.0", rendered.admin_port) in serve().bound


def check_admin_token_file(rendered, serve):
    """The mounted Secret's file is the credential: the admin API admits it and nothing else."""
    assert rendered.admin_token_file == "/var/run/llmop/admin/token"
    served = serve()
    with running(served):
        assert http(served, 8082, ADMIN_TOKEN).get("/v1/adapters").status_code == 200
    assert http(served, 8082, ADMIN_TOKEN + "x").get("/v1/adapters").status_code == 401


def check_adapter_roots(rendered, serve, adapter_dirs):
    """The mounted volumes (the model's, the tenants' claim) are the only roots: a source elsewhere
    (a valid adapter here) is a 403."""
    assert rendered.adapter_roots == ["/mnt/pvc/models", TENANT_ROOT]
    served = serve()
    with running(served):
        r = http(served, 8082, ADMIN_TOKEN).post("/v1/adapters", json={"name": "x", "source": str(adapter_dirs["b"])})
    assert r.status_code == 403 and r.json()["error"]["code"] == "source_not_allowed", r.text


def check_adapter_manifest(rendered, serve, tenant_manifest):
    """The mounted manifest ConfigMap: /ready waits until its adapters are restored (the lifespan's
    task, run here by hand), after which the tenant's adapter is loaded, under its namespaced name."""
    from llmop.engine.server.adapter_restore import restore_adapters

    assert rendered.adapter_manifest == "/etc/llmop/adapters/adapters.json"
    served = serve()
    with running(served):
        before = http(served).get("/ready")
        assert before.status_code == 503 and before.json()["restoring_adapters"], before.text
        asyncio.run(restore_adapters(served.state))
        assert http(served).get("/ready").status_code == 200
        listing = http(served, 8082, ADMIN_TOKEN).get("/v1/adapters").json()
        asyncio.run(admin.unload_adapter(served.state.engine, "team-a/summarizer"))  # the module's engine is shared
    assert listing["manifest"] == {"path": str(tenant_manifest), "restored": True, "error": None}
    assert listing["failed"] == [] and [a["name"] for a in listing["data"]] == ["team-a/summarizer"]


def check_speculative(engine, rendered, probe):
    """n-gram, 3 tokens, at most 2 running (rendered): on a prompt that repeats itself, some step
    emits several tokens, none more than 1 + 3; with 3 requests running none speculates. The probe
    (None) emits one token per step."""
    spec = rendered.speculative
    prompt = tokens(6, 8000) * 4
    steps = [len(o.new_token_ids) for o in run(engine, prompt, 8)]
    assert sum(steps) == 8 and 1 < max(steps) <= 1 + spec.num_tokens, steps
    rids = [f"spec-{i}" for i in range(spec.max_batch_size + 1)]
    for rid in rids:
        engine.add_request(rid, prompt, greedy(6))
    steps = []
    while engine.has_unfinished():
        steps += [len(o.new_token_ids) for o in engine.step()]
    assert steps == [1] * 6 * len(rids)
    assert [len(o.new_token_ids) for o in run(probe, prompt, 3)] == [1, 1, 1]


CONTRACT = {name.removeprefix("check_"): fn for name, fn in dict(globals()).items() if name.startswith("check_")}


def test_every_engine_config_field_has_a_contract_entry():
    assert set(CONTRACT) == set(EngineConfig.model_fields)
    for name, check in CONTRACT.items():  # and each entry checks something
        source = inspect.getsource(check)
        assert check.__doc__ and ("assert " in source or "pytest.raises" in source), name


@pytest.mark.parametrize("field", list(EngineConfig.model_fields))
def test_the_engine_honours(field, request):
    check = CONTRACT[field]
    check(**{p: request.getfixturevalue(p) for p in inspect.signature(check).parameters})
