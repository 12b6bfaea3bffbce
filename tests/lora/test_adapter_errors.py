"""Adapters that do not fit fail their load with a message saying why, and disturb nothing else
(`bad_adapters`: tests/lora/conftest.py)."""

import math

import pytest

from llmop.engine.lora.peft_adapter import AdapterError, load_peft_adapter
from llmop.engine.lora.registry import AdapterState


def test_each_misfit_is_refused_with_its_reason(bad_adapters, lora_engine):
    cfg = lora_engine.checkpoint.config
    for name, (path, why) in bad_adapters.items():
        with pytest.raises(AdapterError, match=why):
            load_peft_adapter(name, path, cfg, max_rank=32)


def test_rslora_and_alpha_scaling(adapter_dirs, lora_engine):
    cfg = lora_engine.checkpoint.config
    assert load_peft_adapter("a", adapter_dirs["attn-r8"], cfg, 32).scaling == 16 / 8
    all32 = load_peft_adapter("b", adapter_dirs["all-r32"], cfg, 32)
    assert all32.scaling == pytest.approx(32 / math.sqrt(32))
    assert all32.rank == 32 and len(all32.target_modules) == 7


def test_failed_loads_leave_the_engine_serving(bad_adapters, lora_engine, references, prompt_ids, lora_kit):
    eng = lora_engine
    for name, (path, why) in bad_adapters.items():
        with pytest.raises(AdapterError):
            eng.lora.add(name, str(path))
        info = next(i for i in eng.lora.infos() if i.name == name)
        assert info.state is AdapterState.FAILED and why in info.error
        with pytest.raises(ValueError, match="not available"):
            eng.add_request(f"to-{name}", prompt_ids[0], lora_kit.greedy(), adapter=name)
    pairs = [(i, m) for i in range(len(prompt_ids)) for m in ("attn-r8", None, "all-r32")]
    for k, (i, m) in enumerate(pairs):
        eng.add_request(f"after-failures-{k}", prompt_ids[i], lora_kit.greedy(), adapter=m)
    tokens = lora_kit.run_to_completion(eng)
    for k, (i, m) in enumerate(pairs):
        assert tokens[f"after-failures-{k}"] == references[(i, m)][0]
    for name in bad_adapters:
        eng.lora.remove(name)
    assert {i.name for i in eng.lora.infos()} == set(lora_kit.ADAPTERS)


def test_bad_adapters_in_the_config_do_not_stop_the_engine(hf_checkpoint_dir, adapter_dirs, tmp_path, prompt_ids,
                                                           references, lora_kit):
    """One tenant's missing adapter, and a pin beyond max_loras, leave those adapters FAILED with
    their reason; the engine starts and serves the rest."""
    from llmop.engine.config import AdapterSource
    from llmop.engine.engine import LLMEngine

    eng = LLMEngine(lora_kit.engine_config(hf_checkpoint_dir, max_loras=1, adapters=[
        AdapterSource(name="attn-r8", source=str(adapter_dirs["attn-r8"]), pinned=True),
        AdapterSource(name="gone", source=str(tmp_path / "nowhere")),
        AdapterSource(name="mlp-r16", source=str(adapter_dirs["mlp-r16"]), pinned=True),
    ]))
    states = {i.name: (i.state, i.error) for i in eng.lora.infos()}
    assert states["gone"][0] is AdapterState.FAILED and "is not a directory" in states["gone"][1]
    assert states["mlp-r16"][0] is AdapterState.FAILED and "cannot pin" in states["mlp-r16"][1]
    with pytest.raises(ValueError, match="'gone' is not available: .*is not a directory"):
        eng.add_request("to-gone", prompt_ids[0], lora_kit.greedy(), adapter="gone")
    eng.add_request("served", prompt_ids[0], lora_kit.greedy(), adapter="attn-r8")
    assert lora_kit.run_to_completion(eng)["served"] == references[(0, "attn-r8")][0]


def test_the_engine_thread_does_not_spin_while_every_request_waits(hf_checkpoint_dir, adapter_dirs, prompt_ids,
                                                                   lora_kit):
    """A request for an adapter still loading waits (until the load ends or its queue deadline); the
    loop must wait for news between such steps, not run thousands of empty steps a second."""
    import asyncio
    import contextlib

    from llmop.engine.async_engine import AsyncEngine
    from llmop.engine.engine import LLMEngine

    eng = LLMEngine(lora_kit.engine_config(hf_checkpoint_dir, max_loras=1))
    eng.lora.begin_load("mlp-r16", str(adapter_dirs["mlp-r16"]))  # LOADING until finish_load, never here
    loop = AsyncEngine(eng, queue_timeout_s=60)
    loop.start()

    async def wait_a_second():
        gen = loop.generate("starved", prompt_ids[0], lora_kit.greedy(), adapter="mlp-r16")
        task = asyncio.ensure_future(gen.__anext__())
        await asyncio.sleep(0.3)
        steps = loop.num_steps
        await asyncio.sleep(1.0)
        task.cancel()  # the generator's cleanup aborts the request
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return loop.num_steps - steps

    try:
        steps = asyncio.run(wait_a_second())
    finally:
        loop.shutdown()
    assert eng.stats().num_running == 0
    assert steps <= 150, f"{steps} empty steps in one second"
