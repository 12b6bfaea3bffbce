"""PEFT's own model as reference for the adapters of `adapter_dirs` (tests/conftest.py, made by
tests/support/lora_adapters.py), adapters that cannot be served (`bad_adapters`), engines served
with their admin API (`admin_served`, `lora_server`), and the helpers the LoRA tests share (`lora_kit`)."""

import contextlib

import pytest
from lora_adapters import ADAPTERS, make_adapter


@pytest.fixture(scope="session")
def peft_reference(hf_checkpoint_dir, adapter_dirs):
    """One PeftModel holding every adapter; `.set_adapter(name)` selects, `.disable_adapter()` = base."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(hf_checkpoint_dir), dtype=torch.float32)
    names = list(adapter_dirs)
    model = PeftModel.from_pretrained(base, str(adapter_dirs[names[0]]), adapter_name=names[0])
    for n in names[1:]:
        model.load_adapter(str(adapter_dirs[n]), adapter_name=n)
    return model.eval()


def peft_greedy(model, adapter, ids, n):
    """PEFT's greedy continuation of `ids` under `adapter` (None = base) and its first-step logits."""
    import contextlib

    import torch

    if adapter is not None:
        model.set_adapter(adapter)
    ctx = model.disable_adapter() if adapter is None else contextlib.nullcontext()
    with ctx, torch.inference_mode():
        out = model.generate(input_ids=torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    return out.sequences[0, len(ids):].tolist(), out.logits[0][0].float()


PROMPTS = ["The Kubernetes operator pattern is", "def add(a, b):\n   ", "Paris is the capital of"]
NEW_TOKENS = 8


def engine_config(base_dir, adapter_dirs=None, **kw):
    from llmop.engine.config import AdapterSource, EngineConfig

    cfg = dict(model=str(base_dir), dtype="float32", device="cpu", kv_cache_memory_bytes=48 << 20,
               max_num_seqs=16, max_num_batched_tokens=256, max_loras=4, max_cpu_loras=8, max_lora_rank=32,
               adapters=[AdapterSource(name=n, source=str(d)) for n, d in (adapter_dirs or {}).items()])
    return EngineConfig(**{**cfg, **kw})


@pytest.fixture(scope="session")
def lora_engine(hf_checkpoint_dir, adapter_dirs):
    """One engine with the four adapters registered from its config (start-up path)."""
    from llmop.engine.engine import LLMEngine

    return LLMEngine(engine_config(hf_checkpoint_dir, adapter_dirs))


@pytest.fixture(scope="session")
def prompt_ids(lora_engine):
    return [lora_engine.tokenizer.encode(p) for p in PROMPTS]


@pytest.fixture(scope="session")
def references(peft_reference, prompt_ids):
    """(prompt index, adapter or None) -> PEFT's greedy tokens and first-step logits."""
    return {(i, a): peft_greedy(peft_reference, a, ids, NEW_TOKENS)
            for i, ids in enumerate(prompt_ids) for a in [None, *ADAPTERS]}


def greedy(n=NEW_TOKENS):
    from llmop.engine.sampling_params import SamplingParams

    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)


def slots_of(engine) -> set[int]:
    """The distinct adapter slots the engine's last step used (its ForwardBatch's LoRA mapping)."""
    b = engine.last_batch
    if b is None or b.lora is None or b.lora.token_slots is None:
        return set()
    return set(b.lora.token_slots) - {-1}


def run_to_completion(engine, on_step=None):
    """Step until idle; request id -> generated tokens."""
    tokens = {}
    while engine.has_unfinished():
        for out in engine.step():
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
        if on_step is not None:
            on_step(engine)
    return tokens


@pytest.fixture(scope="session")
def lora_kit():
    """The helpers above, for test modules (`--import-mode=importlib` cannot import a conftest)."""
    import types

    return types.SimpleNamespace(ADAPTERS=ADAPTERS, MODELS=[None, *ADAPTERS], PROMPTS=PROMPTS, NEW_TOKENS=NEW_TOKENS,
                                 make_adapter=make_adapter, engine_config=engine_config, greedy=greedy,
                                 run_to_completion=run_to_completion, slots_of=slots_of, peft_greedy=peft_greedy,
                                 admin_apps=admin_apps, admin_served=admin_served)


ADMIN_TOKEN = "lora-admin-credential-0123456789"


def admin_apps(engine, token_dir, adapter_roots, **config):
    """The inference app over `engine` and its admin app, loading adapters from `adapter_roots`;
    `config` overrides more EngineConfig fields of the server (e.g. adapter_manifest)."""
    from llmop.engine.config import EngineConfig
    from llmop.engine.server.admin_app import create_admin_app
    from llmop.engine.server.app import create_app

    token = token_dir / "token"
    token.write_text(ADMIN_TOKEN)
    server_config = EngineConfig.model_validate({**engine.config.model_dump(), "admin_port": 0,
                                                 "admin_token_file": str(token),
                                                 "adapter_roots": [str(r) for r in adapter_roots], **config})
    app = create_app(engine, server_config)
    return app, create_admin_app(app.state.llmop)


@contextlib.contextmanager
def admin_served(engine, token_dir, adapter_roots, **config):
    """`admin_apps` served on two free ports (`.url`, `.admin_url`; `.admin` is an httpx client
    carrying the credential, `.admin_token` the credential)."""
    import httpx

    from llmop.engine.server.runner import BackgroundServer

    app, admin_app = admin_apps(engine, token_dir, adapter_roots, **config)
    srv = BackgroundServer(app, admin_app=admin_app).start()
    srv.admin_token = ADMIN_TOKEN
    srv.admin = httpx.Client(base_url=srv.admin_url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=300)
    try:
        yield srv
    finally:
        srv.admin.close()
        srv.stop()


@pytest.fixture(scope="module")
def lora_server(lora_engine, adapter_dirs, tmp_path_factory):
    """`lora_engine` served by `admin_served`, loading adapters from the directory holding
    `adapter_dirs` only (`.adapter_root`)."""
    root = next(iter(adapter_dirs.values())).parent
    with admin_served(lora_engine, tmp_path_factory.mktemp("admin"), [root]) as srv:
        srv.adapter_root = root
        yield srv


@pytest.fixture(scope="session")
def bad_adapters(hf_checkpoint_dir, adapter_dirs, tmp_path_factory):
    """Adapters that cannot be served on the embedded model (all in one directory):
    name -> (directory, expected message fragment)."""
    import json
    import shutil

    from transformers import LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("bad-adapters")
    good = adapter_dirs["attn-r8"]
    out = {}

    corrupt = root / "corrupt"
    shutil.copytree(good, corrupt)
    data = (corrupt / "adapter_model.safetensors").read_bytes()
    (corrupt / "adapter_model.safetensors").write_bytes(data[: len(data) // 2])
    out["corrupt"] = (corrupt, "cannot read adapter weights")

    tiny_dir = root / "tiny-base"
    LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, vocab_size=256)).save_pretrained(tiny_dir)
    out["other-base"] = (make_adapter(tiny_dir, root / "other-base", 8, 8, ["q_proj"], False, 5),
                         "different base architecture")
    out["rank-64"] = (make_adapter(hf_checkpoint_dir, root / "rank-64", 64, 64, ["v_proj"], False, 6),
                      "exceeds max_lora_rank 32")
    out["lm-head"] = (make_adapter(hf_checkpoint_dir, root / "lm-head", 4, 4, ["lm_head"], False, 7),
                      "not a LoRA weight of a decoder layer")
    dora = root / "dora"
    shutil.copytree(good, dora)
    cfg = json.loads((dora / "adapter_config.json").read_text())
    (dora / "adapter_config.json").write_text(json.dumps({**cfg, "use_dora": True}))
    out["dora"] = (dora, "DoRA")
    out["missing"] = (root / "nowhere", "is not a directory")
    return out
