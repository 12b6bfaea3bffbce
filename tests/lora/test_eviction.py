"""More adapters than slots (and than host memory): LRU eviction, transparent reloads, same tokens."""

import pytest


@pytest.fixture(scope="module")
def small_engine(hf_checkpoint_dir, adapter_dirs, lora_kit):
    from llmop.engine.engine import LLMEngine

    return LLMEngine(lora_kit.engine_config(hf_checkpoint_dir, adapter_dirs, max_loras=2, max_cpu_loras=2))


def test_two_slots_serve_four_adapters_with_peft_tokens(small_engine, references, prompt_ids, lora_kit):
    eng = small_engine
    reg = eng.lora.registry
    assert sum(i.state.value == "disk" for i in eng.lora.infos()) == 2, "host tier holds 2 of the 4"
    pairs = [(i, m) for i in range(len(prompt_ids)) for m in lora_kit.MODELS] * 2
    for k, (i, m) in enumerate(pairs):
        eng.add_request(f"evict-{k}", prompt_ids[i], lora_kit.greedy(), adapter=m)

    def check(e):
        assert len(lora_kit.slots_of(e)) <= 2
        running = {r.adapter for r in e.scheduler.running} - {None}
        assert len(running) <= 2, running
        resident = {i.name for i in e.lora.infos() if i.state.value == "resident"}
        assert running <= resident, "a running request's adapter is never evicted"

    tokens = lora_kit.run_to_completion(eng, check)
    for k, (i, m) in enumerate(pairs):
        assert tokens[f"evict-{k}"] == references[(i, m)][0], (k, m)
    assert reg.num_slot_loads > 4, "adapters were evicted from slots and written again"
    assert reg.num_disk_loads > 0, "adapters evicted from host memory were read again from disk"


def test_an_adapter_whose_reload_fails_fails_its_waiting_requests_now(hf_checkpoint_dir, adapter_dirs, tmp_path,
                                                                      prompt_ids, references, lora_kit):
    """An adapter evicted to disk whose files vanish: its requests end with `adapter_unavailable`
    within a step (not at the queue deadline), and the rest of the batch is unaffected."""
    import shutil

    from llmop.engine.engine import LLMEngine

    dirs = {n: shutil.copytree(adapter_dirs[n], tmp_path / n) for n in ("attn-r8", "mlp-r16")}
    eng = LLMEngine(lora_kit.engine_config(hf_checkpoint_dir, dirs, max_loras=1, max_cpu_loras=1))
    on_disk = [i.name for i in eng.lora.infos() if i.state.value == "disk"]
    assert len(on_disk) == 1
    gone = on_disk[0]
    shutil.rmtree(dirs[gone])
    eng.add_request("base", prompt_ids[0], lora_kit.greedy())
    eng.add_request("doomed-0", prompt_ids[1], lora_kit.greedy(), adapter=gone)
    eng.add_request("doomed-1", prompt_ids[2], lora_kit.greedy(), adapter=gone)
    ended, tokens, steps = {}, [], 0
    while eng.has_unfinished():
        steps += 1
        for out in eng.step():
            if out.request_id == "base":
                tokens.extend(out.new_token_ids)
            elif out.finished:
                ended[out.request_id] = (out.error, out.error_message, steps)
    assert set(ended) == {"doomed-0", "doomed-1"}
    for error, message, step in ended.values():
        assert error == "adapter_unavailable" and gone in message and step <= 2
    assert tokens == references[(0, None)][0]
    assert next(i for i in eng.lora.infos() if i.name == gone).state.value == "failed"
