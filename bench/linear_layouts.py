"""The CPU matmul layouts for SmolLM2-135M's decoder weights, side by side (issue 17).

Random weights of the embedded model's shapes (30 layers of q/k/v/o/gate/up/down, fp32), multiplied
by M token rows in turn by each way of computing `x W^T`, rounds interleaved; the median time of
one pass over all 210 weights is reported per layout and M:

- `engine`: `llmop.engine.linear.linear` (GEMV for one row, `(W x^T)^T` for 2-64, `F.linear` above);
- `F.linear`: the plain call on HF's `[out, in]` weight;
- `2-col GEMM`: the engine's former one-row path, the row duplicated into a 2-column GEMM;
- `input-major`: `F.linear` on weights stored `[in, out]` (the BLAS's `x @ W^T` with `W^T` contiguous).

    .venv/bin/python -P bench/linear_layouts.py --threads 1 --rows 1,2,4,8,16
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.nn import functional as F

SHAPES = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]  # [out, in]


def two_column(x, w):
    return torch.mm(w, torch.cat([x, x]).t())[:, : x.shape[0]].t().contiguous()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", default="1,2,4,8,16")
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from llmop.engine.linear import linear

    weights = [torch.randn(o, i) for _ in range(args.layers) for o, i in SHAPES]
    input_major = [w.t().contiguous().t() for w in weights]
    print("| rows | " + " | ".join(["engine", "F.linear", "2-col GEMM", "input-major"]) + " |  (ms per pass)")
    print("|---|---|---|---|---|")
    for m in map(int, args.rows.split(",")):
        xs = {i: torch.randn(m, i) for i in {i for _, i in SHAPES}}
        ways = {
            "engine": (lambda x, w: linear(x, w), weights),
            "F.linear": (lambda x, w: F.linear(x, w), weights),
            "2-col GEMM": (two_column, weights),
            "input-major": (lambda x, w: F.linear(x, w), input_major),
        }
        if m != 1:
            ways["2-col GEMM"] = (lambda x, w: None, weights)  # only a one-row path
        times = {k: [] for k in ways}
        for _ in range(args.rounds):
            for name, (fn, ws) in ways.items():
                t = time.perf_counter()
                for w in ws:
                    fn(xs[w.shape[1]], w)
                times[name].append(time.perf_counter() - t)
        cells = [f"{statistics.median(v[1:]) * 1e3:.1f}" if name != "2-col GEMM" or m == 1 else "-"
                 for name, v in times.items()]
        print(f"| {m} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
