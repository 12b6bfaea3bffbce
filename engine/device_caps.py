"""What the device runs fast, and the dtypes the engine picks from it at start-up.

A CPU with AVX-512 BF16 or AMX runs bf16 matmuls several times faster than fp32 (and streams half
the bytes in decode); one without them emulates bf16 and runs it many times slower than fp32. So
`dtype: auto` on its own means bf16 on such a CPU and on CUDA, fp32 on any other CPU.
`quantization: auto` (with `dtype: auto`) goes further on a CPU without AMX: it stores the linear
layers' weights as fp16 for fbgemm's fp16 GEMM (`fp16_weights`) and computes in fp32, half the
bytes of fp32 weights; on the CPU with AVX-512 BF16 but no AMX measured in docs/benchmarks.md (a
2-core Zen 4) that GEMM also beat oneDNN's bf16 one in decode, by most at a batch of rows. AMX runs
bf16 GEMMs on its tiles, so there bf16 stays.
The engine logs the choices and their reasons; measure a new machine with `bench/decode_speed.py`
rather than trusting a figure from another one (docs/benchmarks.md has the ones behind this rule).
Under `llmop serve` the CPU engine also leaves a core to the server (`serving_threads`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Precision:
    """What the engine computes in: the activations' dtype, the weight quantization it applies
    (`auto` resolved: none, int8 or fp16), and why (for the start-up log)."""

    dtype: torch.dtype
    quantization: str
    reason: str

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


@dataclass(frozen=True)
class CpuFeatures:
    avx512_bf16: bool
    amx_bf16: bool
    avx512_vnni: bool

    @property
    def fast_bf16(self) -> bool:
        return self.avx512_bf16 or self.amx_bf16

    def describe(self) -> str:
        names = [n for n, on in (("avx512_bf16", self.avx512_bf16), ("amx_bf16", self.amx_bf16),
                                 ("avx512_vnni", self.avx512_vnni)) if on]
        return ", ".join(names) or "no AVX-512 BF16/AMX/VNNI"


def parse_cpu_flags(cpuinfo: str) -> CpuFeatures:
    """The features from the first `flags` line of /proc/cpuinfo text (pure; tested directly)."""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            break
    return CpuFeatures("avx512_bf16" in flags, "amx_bf16" in flags, "avx512_vnni" in flags)


@functools.lru_cache(maxsize=1)
def cpu_features() -> CpuFeatures:
    """This machine's CPU features (from /proc/cpuinfo; without it, from torch's own probes)."""
    try:
        with open("/proc/cpuinfo") as f:
            return parse_cpu_flags(f.read())
    except OSError:
        probe = torch.cpu
        return CpuFeatures(bool(getattr(probe, "_is_avx512_bf16_supported", lambda: False)()),
                           bool(getattr(probe, "_is_amx_tile_supported", lambda: False)()),
                           bool(getattr(probe, "_is_vnni_supported", lambda: False)()))


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def auto_dtype(device: torch.device, features: CpuFeatures | None = None) -> tuple[torch.dtype, str]:
    """The dtype `auto` means on this device, and why (for the start-up log)."""
    if device.type == "cuda":
        return torch.bfloat16, "CUDA"
    feats = features or cpu_features()
    if feats.fast_bf16:
        return torch.bfloat16, f"CPU with {feats.describe()}"
    return torch.float32, f"CPU without AVX-512 BF16 or AMX ({feats.describe()}): bf16 would be emulated"


def fbgemm_fp16_available() -> bool:
    """Whether this torch build has fbgemm's fp16-weight GEMM through both of its ops (`fp16_weights`;
    x86 builds only: elsewhere the ops exist and raise) and the CPU runs it vectorised."""
    return (hasattr(torch, "fbgemm_pack_gemm_matrix_fp16") and hasattr(torch.ops.quantized, "linear_prepack_fp16")
            and torch.backends.quantized.engine in ("x86", "fbgemm")  # the ops raise under onednn/qnnpack
            and torch.backends.cpu.get_cpu_capability() != "DEFAULT")


def auto_quantization(dtype_name: str, device: torch.device, features: CpuFeatures | None = None,
                      fbgemm_fp16: bool | None = None) -> tuple[str, str]:
    """What `quantization: auto` means, and why: fp16 weights (over fp32 activations) when the dtype
    is the engine's own choice too (`auto`), on a CPU without AMX whose torch has fbgemm's fp16 GEMM;
    none otherwise."""
    if dtype_name != "auto":
        return "none", f"dtype {dtype_name} is configured"
    if device.type != "cpu":
        return "none", f"{device.type} computes in bf16"
    feats = features or cpu_features()
    if feats.amx_bf16:
        return "none", "AMX runs bf16 GEMMs on its tiles"
    if not (fbgemm_fp16_available() if fbgemm_fp16 is None else fbgemm_fp16):
        return "none", "this torch build lacks fbgemm's fp16 GEMM"
    return "fp16", (f"CPU without AMX ({feats.describe()}): fbgemm's fp16 weights over fp32 activations "
                    "stream half fp32's bytes (the measured choice over bf16 without AMX: docs/benchmarks.md)")


def resolve_precision(dtype_name: str, quantization: str, device: torch.device, features: CpuFeatures | None = None,
                      fbgemm_fp16: bool | None = None) -> Precision:
    """The dtype and the concrete quantization of an engine config on `device` (ValueError for an
    unknown dtype). The core resolves them once and hands its ranks the concrete names."""
    if quantization == "auto":
        resolved, why = auto_quantization(dtype_name, device, features, fbgemm_fp16)
        why_q = f"{resolved}, {why}"
    else:
        resolved, why_q = quantization, "configured"
    dtype, why_d = resolve_dtype(dtype_name, device, resolved, features)
    return Precision(dtype, resolved, f"dtype {dtype_name}: {why_d}; quantization {quantization}: {why_q}")


def resolve_dtype(name: str, device: torch.device, quantization: str = "none",
                  features: CpuFeatures | None = None) -> tuple[torch.dtype, str]:
    """(dtype, reason): `auto` by capability, else the named dtype. fp16 weights multiply into fp32
    activations, so `auto` with `quantization: fp16` on the CPU is fp32 whatever the CPU has."""
    if name == "auto" and quantization == "fp16" and device.type == "cpu":
        return torch.float32, "fp16 weights compute with fp32 activations"
    if name == "auto":
        return auto_dtype(device, features)
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose auto or one of {sorted(DTYPES)}")
    return DTYPES[name], "configured"


def rank_threads(threads: int, tensor_parallel_size: int) -> int:
    """A CPU rank's torch threads when `tensor_parallel_size` ranks share the engine's `threads`
    (each rank a process of its own; at size 1 the one rank has all of them)."""
    return max(1, threads // tensor_parallel_size)


def serving_threads(default_threads: int, omp_num_threads: str | None, cpu_budget: int | None = None) -> int | None:
    """Torch's CPU threads under `llmop serve`: one fewer than the CPUs it may use (torch's default,
    capped by the container's CPU limit: `cpu_quota.cpu_budget`), so the HTTP server, the engine
    loop and the response streams keep a core instead of preempting an OpenMP thread that its peers
    then spin-wait for (docs/engine.md has the measurement); None, leaving torch as it is, when
    OMP_NUM_THREADS is set."""
    if omp_num_threads:
        return None
    usable = min(default_threads, cpu_budget) if cpu_budget is not None else default_threads
    return max(1, usable - 1)
