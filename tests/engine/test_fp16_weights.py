"""fp16 weights for fp32 activations on the CPU (`quantization: fp16`): every linear layer is
converted, the embedding stays fp32, greedy tokens stay with HF's fp32 model, and where it cannot
run (16-bit activations, CUDA) it is refused at start-up rather than ignored."""

import pytest
import torch

from llmop.engine.sampling_params import SamplingParams

NEW = 16


@pytest.fixture(scope="module")
def fp16_llm():
    """Built with torch on one thread, as `llmop serve` runs on a 2-core node: the one-thread op."""
    from llmop.engine.llm import LLM

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return LLM(None, dtype="float32", quantization="fp16", kv_cache_memory_bytes=64 << 20,
                   max_num_seqs=8, max_num_batched_tokens=512)
    finally:
        torch.set_num_threads(before)


def test_every_linear_layer_holds_fp16_weights(fp16_llm):
    from llmop.engine.fp16_weights import Fp16Op, Fp16WeightLinear

    model = fp16_llm.engine.executor.runner.model
    layers = [m for m in model.modules() if isinstance(m, Fp16WeightLinear)]
    assert len(layers) == 30 * 7 + 1  # seven projections per decoder layer, and the (tied) LM head
    assert {m.op for m in layers} == {Fp16Op.ONE_THREAD}  # packed for the one thread it was built on
    assert fp16_llm.engine.executor.describe()[0].fp16_op == Fp16Op.ONE_THREAD.value
    assert model.model.embed_tokens.weight.dtype == torch.float32, "the embedding table stays fp32"
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    info = fp16_llm.engine.executor.describe()[0]
    embedding = model.model.embed_tokens.weight.nbytes
    assert info.weight_bytes == embedding + sum(2 * m.in_features * m.out_features for m in layers) + sum(
        p.nbytes for n, p in model.named_parameters() if "norm" in n)  # the packed weights are counted


def test_fp16_weight_greedy_tokens_match_hf(fp16_llm, prompt_ids, hf_continuations):
    outs = fp16_llm.generate(prompt_ids, SamplingParams(max_tokens=NEW, temperature=0.0, ignore_eos=True))
    ref = [tokens[:NEW] for tokens, _ in hf_continuations]
    assert all(o.token_ids[0] == r[0] for o, r in zip(outs, ref))
    same = sum(a == b for o, r in zip(outs, ref) for a, b in zip(o.token_ids, r))
    assert same >= 0.9 * NEW * len(ref), f"{same} of {NEW * len(ref)} greedy tokens agree with HF fp32"


@pytest.mark.parametrize("device,dtype", [("cpu", torch.bfloat16), ("cpu", torch.float16), ("cuda", torch.float32)])
def test_fp16_weights_are_refused_where_they_cannot_run(device, dtype):
    from llmop.engine.fp16_weights import unsupported_reason

    assert "quantization: fp16" in unsupported_reason(torch.device(device), dtype)
    assert unsupported_reason(torch.device("cpu"), torch.float32) is None  # this x86 build has fbgemm


def test_the_engine_refuses_fp16_weights_with_bf16_activations():
    from llmop.engine.llm import LLM

    with pytest.raises(ValueError, match="quantization: fp16"):
        LLM(None, dtype="bfloat16", quantization="fp16", kv_cache_memory_bytes=16 << 20, max_num_seqs=2)


def test_tp3_over_fp16_weights_gives_the_tp1_tokens(fp16_llm, prompt_ids, monkeypatch):
    """Each rank converts its own slices, after sharding, packed for its own thread count (the core's
    three torch threads are one per rank). Reached through the defaults on a CPU without AMX (made
    so here)."""
    from llmop.engine.device_caps import CpuFeatures
    from llmop.engine.llm import LLM

    params = SamplingParams(max_tokens=NEW, temperature=0.0, ignore_eos=True)
    want = [list(o.token_ids) for o in fp16_llm.generate(prompt_ids[:3], params)]
    monkeypatch.setattr("llmop.engine.device_caps.cpu_features", lambda: CpuFeatures(False, False, False))
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        tp3 = LLM(None, tensor_parallel_size=3, kv_cache_memory_bytes=32 << 20, max_num_seqs=4)
    finally:
        torch.set_num_threads(before)
    try:
        assert (tp3.engine.config.dtype, tp3.engine.config.quantization) == ("float32", "fp16")
        assert [r.fp16_op for r in tp3.engine.executor.describe()] == ["fbgemm_linear_fp16_weight_fp32_activation"] * 3
        assert [list(o.token_ids) for o in tp3.generate(prompt_ids[:3], params)] == want
    finally:
        tp3.engine.shutdown()


def test_defaults_pick_fp16_weights_on_a_cpu_without_amx(fp16_llm, prompt_ids, monkeypatch):
    """`dtype: auto` and `quantization: auto` (the defaults) on a CPU with AVX-512 BF16 but no AMX
    (made so here), torch on two threads: the engine is the one configured with fp16 weights (same
    layers, same tokens), packed for the op that uses both threads, and its config, which its ranks,
    draft model and logs read, holds the concrete names, not `auto`."""
    from llmop.engine.device_caps import CpuFeatures
    from llmop.engine.fp16_weights import Fp16Op, Fp16WeightLinear
    from llmop.engine.llm import LLM

    monkeypatch.setattr("llmop.engine.device_caps.cpu_features", lambda: CpuFeatures(True, False, True))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        llm = LLM(None, kv_cache_memory_bytes=32 << 20, max_num_seqs=4)
    finally:
        torch.set_num_threads(before)
    try:
        assert (llm.engine.config.dtype, llm.engine.config.quantization) == ("float32", "fp16")
        model = llm.engine.executor.runner.model
        layers = [m for m in model.modules() if isinstance(m, Fp16WeightLinear)]
        assert len(layers) == 30 * 7 + 1 and {m.op for m in layers} == {Fp16Op.ALL_THREADS}
        params = SamplingParams(max_tokens=NEW, temperature=0.0, ignore_eos=True)
        want = [list(o.token_ids) for o in fp16_llm.generate(prompt_ids[:3], params)]
        assert [list(o.token_ids) for o in llm.generate(prompt_ids[:3], params)] == want
    finally:
        llm.engine.shutdown()


def test_the_op_follows_the_threads():
    from llmop.engine.fp16_weights import Fp16Op

    assert Fp16Op.for_threads(1) is Fp16Op.ONE_THREAD
    assert Fp16Op.for_threads(2) is Fp16Op.ALL_THREADS and Fp16Op.for_threads(64) is Fp16Op.ALL_THREADS


@pytest.mark.parametrize("op_name", ["ONE_THREAD", "ALL_THREADS"])
def test_each_fp16_op_matches_its_torch_reference(op_name):
    """Both ops against `F.linear` over the fp16-rounded weight in fp32, on irregular shapes, 2-D
    and 3-D inputs of 1 to 37 rows, with and without a bias."""
    from llmop.engine.fp16_weights import Fp16Op, Fp16WeightLinear

    gen = torch.Generator().manual_seed(7)
    for out_f, in_f, lead, bias in [(5, 3, (1,), False), (67, 45, (37,), True), (130, 96, (2, 3), True),
                                    (33, 257, (4,), False)]:
        w = torch.randn(out_f, in_f, generator=gen)
        b = torch.randn(out_f, generator=gen) if bias else None
        x = torch.randn(*lead, in_f, generator=gen)
        got = Fp16WeightLinear(w, b, Fp16Op[op_name])(x)
        want = torch.nn.functional.linear(x, w.half().float(), b)
        assert got.shape == want.shape and got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_rank_refuses_an_unresolved_quantization():
    from llmop.engine.config import EngineConfig
    from llmop.engine.model_runner import ModelRunner
    from llmop.engine.tp.shard import RankShard

    with pytest.raises(ValueError, match="the engine core resolved"):
        ModelRunner(EngineConfig(), RankShard(0, 1), torch.float32, ())
