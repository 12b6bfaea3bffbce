"""Which reduced-precision matmuls torch offers a CPU with fp32 activations, over SmolLM2-135M's
210 decoder weight shapes (30 layers x q, k, v, o, gate, up, down; random weights, more than the
L3 holds), against the fp32 GEMM in the same run.

Why: on a CPU without AVX-512 BF16/AMX the engine runs fp32 (`dtype: auto`), and its int8 path
(`torch._weight_int8pack_mm`, or dequantize + fp32 GEMM past 8 rows) is fast only with 16-bit
activations. This measures the engine's int8 path and the fbgemm kernels torch ships for fp32
activations: dynamic int8 (int8 weights, activations quantized per call with one scale per tensor)
and fp16 weights. Both fbgemm APIs are marked deprecated in torch; the bench also reports the
memory their packed weights take. Two more for what a 4-bit format (the embedded GGUF is Q4_1)
would buy: bf16 weights and activations, and torch's int4 weights in groups of 32 (scale and zero
per group, as Q4_1 has; `torch._weight_int4pack_mm_for_cpu`), which is fast only with bf16
activations, so its path converts the fp32 activations to bf16 and the product back, as an engine
would. Speed only: dynamic int8's per-tensor activation scale wrecked SmolLM2's greedy tokens when
tried in the engine (docs/benchmarks.md).

    .venv/bin/python -P bench/cpu_int8_paths.py [--rows 1,4,16] [--rounds 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import gc
import time
import warnings

import torch

INT4_GROUP = 32
SHAPES = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)] * 30


def rss_mib() -> float:
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20


def fbgemm_dynamic(w: torch.Tensor):
    scale = w.abs().amax(1) / 127
    q = torch.quantize_per_channel(w, scale, torch.zeros(w.shape[0], dtype=torch.long), 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(q, None)


def main() -> None:
    from llmop.kernels.int8_matmul import int8_matmul, quantize_per_channel

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message=".*deprecated.*")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    weights = [torch.randn(o, i) for o, i in SHAPES]
    int8 = [quantize_per_channel(w) for w in weights]
    before = rss_mib()
    dyn = [fbgemm_dynamic(w) for w in weights]
    gc.collect()
    dyn_mib = rss_mib() - before
    before = rss_mib()
    fp16 = [torch.fbgemm_pack_gemm_matrix_fp16(w) for w in weights]
    gc.collect()
    fp16_mib = rss_mib() - before
    bf16 = [w.bfloat16() for w in weights]
    int4 = [(torch._convert_weight_to_int4pack_for_cpu(torch.randint(0, 16, w.shape, dtype=torch.int32), 1),
             torch.randn(w.shape[1] // INT4_GROUP, w.shape[0], 2, dtype=torch.bfloat16)) for w in weights]  # fmt: skip
    params = sum(o * i for o, i in SHAPES)
    paths = {
        "fp32 F.linear": lambda x, k: torch.nn.functional.linear(x, weights[k]),
        "engine int8 (int8_matmul)": lambda x, k: int8_matmul(x, *int8[k]),
        "fbgemm dynamic int8 (W8A8)": lambda x, k: torch.ops.quantized.linear_dynamic(x, dyn[k], True),
        "fbgemm fp16 weights": lambda x, k: torch.fbgemm_linear_fp16_weight_fp32_activation(x, fp16[k], None),
        "bf16 F.linear": lambda x, k: torch.nn.functional.linear(x.bfloat16(), bf16[k]).float(),
        "int4 weights, bf16 activations": lambda x, k: torch._weight_int4pack_mm_for_cpu(
            x.bfloat16(), int4[k][0], INT4_GROUP, int4[k][1]).float(),
    }
    print(f"{params / 1e6:.1f} M weights; packed memory: fbgemm int8 {dyn_mib:.0f} MiB "
          f"({dyn_mib * 2**20 / params:.2f} B/weight), fbgemm fp16 {fp16_mib:.0f} MiB "
          f"({fp16_mib * 2**20 / params:.2f} B/weight); plain int8 would be {params / 2**20:.0f} MiB")
    print("| rows | " + " | ".join(paths) + " |")
    print("|---|" + "---|" * len(paths))
    for m in [int(r) for r in args.rows.split(",")]:
        xs = {i: torch.randn(m, i) for i in (576, 1536)}
        best = {name: float("inf") for name in paths}
        for _ in range(args.rounds):  # paths in turn, each round: the best of 5 passes over all weights
            for name, fn in paths.items():
                fn(xs[576], 0)
                for _ in range(5):
                    t0 = time.perf_counter()
                    for k, (_, i) in enumerate(SHAPES):
                        fn(xs[i], k)
                    best[name] = min(best[name], (time.perf_counter() - t0) * 1e3)
        base = best["fp32 F.linear"]
        print(f"| {m} | " + " | ".join(f"{t:.1f} ms ({base / t:.2f}x)" for t in best.values()) + " |")


if __name__ == "__main__":
    main()
