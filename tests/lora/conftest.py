"""PEFT's own model as reference for the adapters of `adapter_dirs` (tests/conftest.py, made by
tests/support/lora_adapters.py), and the helpers the LoRA tests share (`lora_kit`)."""

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

    return types.SimpleNamespace(ADAPTERS=ADAPTERS, MODELS=[None, *ADAPTERS], PROMPTS=PROMPTS, NEW_TOKENS=NEW_TOKENS, make_adapter=make_adapter,
                                 engine_config=engine_config, greedy=greedy, run_to_completion=run_to_completion, slots_of=slots_of,
                                 peft_greedy=peft_greedy)


ADMIN_TOKEN = "lora-admin-credential-0123456789"


@pytest.fixture(scope="module")
def lora_server(lora_engine, adapter_dirs, tmp_path_factory):
    """`lora_engine` served on a free port, with its admin API on a second one (`.admin_url`;
    `.admin` is an httpx client carrying the credential) that loads adapters from the directory
    holding `adapter_dirs` only (`.adapter_root`)."""
    import httpx

    from llmop.engine.config import EngineConfig
    from llmop.engine.server.admin_app import create_admin_app
    from llmop.engine.server.app import create_app
    from llmop.engine.server.runner import BackgroundServer

    token = tmp_path_factory.mktemp("admin") / "token"
    token.write_text(ADMIN_TOKEN)
    root = next(iter(adapter_dirs.values())).parent
    config = EngineConfig.model_validate({**lora_engine.config.model_dump(), "admin_port": 0,
                                          "admin_token_file": str(token), "adapter_roots": [str(root)]})
    app = create_app(lora_engine, config)
    srv = BackgroundServer(app, admin_app=create_admin_app(app.state.llmop)).start()
    srv.adapter_root, srv.admin_token = root, ADMIN_TOKEN
    srv.admin = httpx.Client(base_url=srv.admin_url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=300)
    yield srv
    srv.admin.close()
    srv.stop()
