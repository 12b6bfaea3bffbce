"""The dtype `auto` picks follows the device's capability (pure functions, no model)."""

import torch

from llmop.engine.device_caps import (CpuFeatures, auto_dtype, auto_quantization, parse_cpu_flags, resolve_dtype,
                                     resolve_precision, serving_threads)

ZEN2 = "processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma\nbugs\t\t: sysret_ss_attrs\n"
ZEN4 = "flags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16\n"
SAPPHIRE = "flags\t\t: avx512f avx512_vnni amx_bf16 amx_tile amx_int8\n"


def test_flags_are_read_from_the_first_flags_line():
    assert parse_cpu_flags(ZEN2) == CpuFeatures(False, False, False)
    assert parse_cpu_flags(ZEN4) == CpuFeatures(True, False, True)
    assert parse_cpu_flags(SAPPHIRE) == CpuFeatures(False, True, True)
    assert parse_cpu_flags("") == CpuFeatures(False, False, False)


def test_auto_is_bf16_only_where_the_cpu_runs_it_natively():
    cpu = torch.device("cpu")
    assert auto_dtype(cpu, parse_cpu_flags(ZEN2))[0] == torch.float32
    assert "emulated" in auto_dtype(cpu, parse_cpu_flags(ZEN2))[1]
    assert auto_dtype(cpu, parse_cpu_flags(ZEN4))[0] == torch.bfloat16
    assert auto_dtype(cpu, parse_cpu_flags(SAPPHIRE))[0] == torch.bfloat16
    assert auto_dtype(torch.device("cuda"), parse_cpu_flags(ZEN2))[0] == torch.bfloat16


def test_a_named_dtype_is_taken_as_is():
    assert resolve_dtype("float16", torch.device("cpu")) == (torch.float16, "configured")
    assert resolve_dtype("float32", torch.device("cuda"))[0] == torch.float32


def test_auto_with_fp16_weights_is_fp32_on_any_cpu():
    """fp16 weights multiply into fp32 activations: `auto` must not pick bf16 on a BF16 CPU (the
    engine would then refuse the quantization the operator rendered)."""
    assert resolve_dtype("auto", torch.device("cpu"), "fp16")[0] == torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu"), "fp16")[0] == torch.bfloat16  # named: refused later
    assert resolve_dtype("auto", torch.device("cuda"), "fp16")[0] == torch.bfloat16


def picked(*args) -> tuple[torch.dtype, str]:
    p = resolve_precision(*args)
    return p.dtype, p.quantization


def test_auto_quantization_is_fp16_weights_on_a_cpu_without_amx():
    cpu, zen2, zen4, sapphire = (torch.device("cpu"), parse_cpu_flags(ZEN2), parse_cpu_flags(ZEN4),
                                 parse_cpu_flags(SAPPHIRE))
    p = resolve_precision("auto", "auto", cpu, zen2, fbgemm_fp16=True)
    assert (p.dtype, p.quantization, p.dtype_name) == (torch.float32, "fp16", "float32")
    assert "fp16 weights" in p.reason and "dtype auto" in p.reason
    # AVX-512 BF16 without AMX: fp16 weights over fp32 activations too (the measured choice).
    assert picked("auto", "auto", cpu, zen4, True) == (torch.float32, "fp16")
    assert picked("auto", "auto", cpu, sapphire, True) == (torch.bfloat16, "none")
    assert "AMX" in resolve_precision("auto", "auto", cpu, sapphire, True).reason
    assert picked("auto", "auto", torch.device("cuda"), zen2, True) == (torch.bfloat16, "none")
    # A configured dtype keeps its weights; a build without fbgemm's fp16 GEMM keeps float ones.
    assert picked("float32", "auto", cpu, zen2, True) == (torch.float32, "none")
    assert picked("bfloat16", "auto", cpu, zen4, True) == (torch.bfloat16, "none")
    assert picked("auto", "auto", cpu, zen2, False) == (torch.float32, "none")
    assert picked("auto", "auto", cpu, zen4, False) == (torch.bfloat16, "none")
    assert auto_quantization("auto", cpu, zen4, fbgemm_fp16=True)[0] == "fp16"
    assert auto_quantization("auto", cpu, sapphire, fbgemm_fp16=True)[0] == "none"
    # A configured quantization is taken as is, whatever the machine.
    assert picked("auto", "none", cpu, zen2, True) == (torch.float32, "none")
    assert picked("auto", "none", cpu, zen4, True) == (torch.bfloat16, "none")
    assert picked("auto", "int8", cpu, zen4, True) == (torch.bfloat16, "int8")
    assert picked("auto", "fp16", cpu, sapphire, True) == (torch.float32, "fp16")


def test_serving_leaves_a_core_unless_omp_num_threads_says():
    assert serving_threads(2, None) == 1
    assert serving_threads(16, "") == 15
    assert serving_threads(1, None) == 1  # never zero
    assert serving_threads(8, "4") is None  # the operator's or user's choice stands


def test_serving_threads_follow_the_containers_cpu_limit():
    assert serving_threads(64, None, cpu_budget=4) == 3  # a 4-CPU pod on a 64-core node
    assert serving_threads(2, None, cpu_budget=8) == 1  # the limit is no reason for more threads
    assert serving_threads(64, None, cpu_budget=1) == 1
    assert serving_threads(64, "2", cpu_budget=4) is None
