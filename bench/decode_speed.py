"""Decode speed of engine configurations side by side: engines stepped in turn, one step each.

Each configuration (dtype, quantization, KV dtype) gets an engine of its own, in a process of its
own, holding `--batch` sequences of a 128-token random prompt; the engines take turns a step at a
time, so a shared machine's drift hits all of them alike. With `--baseline REV` every configuration
also runs on the code of git revision REV (exported to a temporary directory and imported from
there), interleaved with this tree's: a before/after measurement in one run. Reported per engine:
the prefill step (TTFT of the batch), decode step time (median of `--steps`), decode tok/s, and the
ratios to the first engine and to the same configuration at the baseline (the median of the
per-round ratios: steps of one round ran back to back, so the machine's drift cancels). With
`--prefill` every step prefills a new prompt alone (decode_step_ms is then a prefill step). Works on CUDA too
(`--device cuda`: add `--configs bf16,int8,bf16-kvfp8`).

    .venv/bin/python -P bench/decode_speed.py --batch 1 --configs fp32,bf16,int8
    .venv/bin/python -P bench/decode_speed.py --batch 16 --configs fp32 --threads 1 --baseline main
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIGS = {
    "auto": dict(),  # the engine's defaults: what `dtype`/`quantization` auto resolve to on this machine
    "fp32": dict(dtype="float32"),
    "bf16": dict(dtype="bfloat16"),
    "int8": dict(dtype="bfloat16", quantization="int8"),
    "int8-fp32": dict(dtype="float32", quantization="int8"),
    "fp16w": dict(dtype="float32", quantization="fp16"),
    "bf16-kvfp8": dict(dtype="bfloat16", kv_cache_dtype="fp8_e4m3"),
}
REPO = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = {"engine": "engine", "kernels": "kernels", "operator": "operator"}  # pyproject's package-dir


def export_revision(rev: str, into: Path) -> Path:
    """`rev`'s tree under `into/src`, mapped into an importable `llmop` package under `into/pkg`
    (symlinks, as pyproject's package-dir maps the folders); returns the directory for PYTHONPATH."""
    src, pkg = into / "src", into / "pkg" / "llmop"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    pkg.mkdir(parents=True)
    for entry in (src / "llmop").iterdir():
        (pkg / entry.name).symlink_to(entry)
    for name, folder in PACKAGE_DIRS.items():
        (pkg / name).symlink_to(src / folder)
    return pkg.parent


def serve(spec: dict) -> None:
    """Child process: build one engine, then time one `step()` per line read from stdin."""
    import random
    import time

    import torch

    torch.set_num_threads(spec["threads"])
    from llmop.engine.engine import LLMEngine
    from llmop.engine.sampling_params import SamplingParams

    batch, prompt = spec["batch"], spec["prompt"]
    eng = LLMEngine(device=spec["device"], kv_cache_memory_bytes=512 << 20, max_num_seqs=max(batch, 1),
                    max_num_batched_tokens=max(1024, batch * prompt), **CONFIGS[spec["config"]])
    rng = random.Random(0)
    for i in range(0 if spec["prefill"] else batch):
        eng.add_request(f"r{i}", [rng.randrange(100, 49000) for _ in range(prompt)],
                        SamplingParams(max_tokens=spec["steps"] + 8, temperature=0.0, ignore_eos=True))
    print("ready", flush=True)
    for i, _ in enumerate(sys.stdin):
        if spec["prefill"]:  # every step prefills a new prompt (and samples its one token)
            eng.add_request(f"p{i}", [rng.randrange(100, 49000) for _ in range(prompt)],
                            SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True))
        t = time.perf_counter()
        eng.step()
        print(time.perf_counter() - t, flush=True)


class EngineProcess:
    """One engine in a child process, importing llmop from `pythonpath`."""

    def __init__(self, name: str, spec: dict, pythonpath: str):
        self.name = name
        env = dict(os.environ, PYTHONPATH=pythonpath, PYTHONSAFEPATH="1")
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", json.dumps(spec)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"engine {name} did not start")

    def step(self) -> float:
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="fp32,bf16,int8")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--baseline", help="git revision to run every configuration on as well, interleaved")
    ap.add_argument("--prefill", action="store_true",
                    help="time prefills instead: each step prefills a new --prompt-token prompt (--batch ignored)")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        return serve(json.loads(args.serve))
    here = os.environ.get("PYTHONPATH", "")
    tmp = tempfile.TemporaryDirectory(prefix="llmop-baseline-")
    trees = [("", here)] + ([(f"@{args.baseline}", str(export_revision(args.baseline, Path(tmp.name))))]
                            if args.baseline else [])
    engines = []
    if len(set(args.configs.split(","))) != len(args.configs.split(",")):
        raise SystemExit("--configs names a configuration twice")
    for config in args.configs.split(","):
        for suffix, path in trees:
            spec = dict(config=config, batch=args.batch, steps=args.steps, prompt=args.prompt,
                        threads=args.threads, device=args.device, prefill=args.prefill)
            engines.append(EngineProcess(config + suffix, spec, path))
    prefill = {e.name: e.step() for e in engines}
    decode = {e.name: [] for e in engines}
    for r in range(args.steps):
        for e in engines if r % 2 == 0 else engines[::-1]:  # alternate who goes first: no seat is favoured
            decode[e.name].append(e.step())
    for e in engines:
        e.close()
    tmp.cleanup()
    step = {name: statistics.median(times[2:]) for name, times in decode.items()}
    first = step[engines[0].name]
    rows = []
    for e in engines:
        base = e.name.split("@")[0] + (f"@{args.baseline}" if args.baseline else "")
        rows.append({"config": e.name, "batch": args.batch, "prefill_s": round(prefill[e.name], 3),
                     "decode_step_ms": round(step[e.name] * 1e3, 1), "decode_tok_s": round(args.batch / step[e.name], 1),
                     "speedup_vs_first": round(first / step[e.name], 2),
                     "speedup_vs_baseline": round(statistics.median(  # paired by round: drift cancels
                         b / t for b, t in zip(decode[base][2:], decode[e.name][2:])), 3)})
        print(json.dumps(rows[-1]), flush=True)
    print("\n| config | batch | prefill step (s) | decode step (ms) | decode tok/s | vs first | vs baseline |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['batch']} | {r['prefill_s']} | {r['decode_step_ms']} | {r['decode_tok_s']} "
              f"| {r['speedup_vs_first']}x | {r['speedup_vs_baseline']}x |")


if __name__ == "__main__":
    main()
