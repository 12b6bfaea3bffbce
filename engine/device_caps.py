"""What the device runs fast, and the dtypes the engine picks from it at start-up.

A CPU with AVX-512 BF16 or AMX runs bf16 matmuls several times faster than fp32 (and streams half
the bytes in decode); one without them emulates bf16 and runs it many times slower than fp32. So
`dtype: auto` means bf16 on such a CPU and on CUDA, fp32 on any other CPU. The engine logs the
choice and its reason; measure a new machine with `bench/throughput.py` rather than trusting a
figure from another one. Under `llmop serve` the CPU engine also leaves a core to the server
(`serving_threads`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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


def resolve_dtype(name: str, device: torch.device, quantization: str = "none") -> tuple[torch.dtype, str]:
    """(dtype, reason): `auto` by capability, else the named dtype. fp16 weights multiply into fp32
    activations, so `auto` with `quantization: fp16` on the CPU is fp32 whatever the CPU has."""
    if name == "auto" and quantization == "fp16" and device.type == "cpu":
        return torch.float32, "quantization fp16: fp16 weights compute with fp32 activations"
    if name == "auto":
        return auto_dtype(device)
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose auto or one of {sorted(DTYPES)}")
    return DTYPES[name], "configured"


def serving_threads(default_threads: int, omp_num_threads: str | None) -> int | None:
    """Torch's CPU threads under `llmop serve`: one fewer than torch's default, so the HTTP server,
    the engine loop and the response streams keep a core instead of preempting an OpenMP thread
    that its peers then spin-wait for (docs/engine.md has the measurement); None, leaving torch as
    it is, when OMP_NUM_THREADS is set."""
    if omp_num_threads:
        return None
    return max(1, default_threads - 1)
