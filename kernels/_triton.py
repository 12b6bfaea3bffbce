"""Guarded Triton import shared by every kernel file.

Each op file holds a Triton kernel beside its plain-torch reference, and the CPU engine uses the
reference.  So the op files must import even where Triton is missing or broken: this module
provides `triton`, `tl` and `jit`, with harmless stand-ins when Triton cannot be imported (the
reference still works; launching a kernel raises the import error).

`jit` picks Triton's interpreter when `TRITON_INTERPRET=1` is set or when no CUDA device exists
(a compiled kernel could never launch there).  Triton decides this when a function is *decorated*,
its own library functions (`tl.max`, `tl.cdiv`, ...) included when `triton` is first imported; an
interpreted kernel calling a compiled library function fails.  So without CUDA this module sets
`TRITON_INTERPRET=1` before it imports Triton, and it must be the first to import Triton.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import triton
    import triton.language as tl

    TRITON_ERROR: Exception | None = None
except Exception as exc:  # ImportError, or a broken install: the torch references still work
    triton = None
    TRITON_ERROR = exc

    class _Stub:
        """Stands in for `triton.language` so annotations like `tl.constexpr` still evaluate."""

        constexpr = object

        def __getattr__(self, name):
            raise RuntimeError(f"Triton is unavailable: {TRITON_ERROR!r}")

    tl = _Stub()

HAS_TRITON = triton is not None
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1" or not torch.cuda.is_available()


class _Unavailable:
    """What `jit` returns without Triton: indexing it (a launch) raises the import error."""

    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, grid):
        raise RuntimeError(f"Triton is unavailable, cannot launch {self.fn.__name__}: {TRITON_ERROR!r}")


def _interpreted(fn):
    """Triton's `InterpretedFunction`, made cheaper to call as a device function.

    Calling a jit helper from a kernel under the interpreter re-patches `triton.language` on every
    call (~5 ms: a third of the run time of these kernels).  The kernel launch has patched it
    already, so nested calls skip that.  This leans on interpreter internals; if they change, the
    stock class is used (a helper run unpatched would fail loudly, never compute silently).
    """
    from triton.runtime import interpreter

    base = interpreter.InterpretedFunction
    if not (hasattr(base, "rewrite") and hasattr(interpreter, "InterpreterError")):
        return base(fn)

    class _Nested(base):
        def __call__(self, *args, **kwargs):
            try:
                return self.rewrite()(*args, **kwargs)
            except Exception as e:
                raise interpreter.InterpreterError(repr(e)) from e

    return _Nested(fn)


def jit(fn):
    """`triton.jit`, in interpreter mode when `INTERPRET` (see the module docstring)."""
    if not HAS_TRITON:
        return _Unavailable(fn)
    return _interpreted(fn) if INTERPRET else triton.jit(fn)


def check_launchable(*tensors: torch.Tensor) -> None:
    """Raise a clear error when a kernel cannot run on these tensors."""
    if not HAS_TRITON:
        raise RuntimeError(f"Triton is unavailable: {TRITON_ERROR!r}")
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")
    if not INTERPRET and not tensors[0].is_cuda:
        raise ValueError(
            "compiled Triton kernels need CUDA tensors; set TRITON_INTERPRET=1 before importing "
            "llmop.kernels to run them on the CPU"
        )


def next_pow2(n: int, minimum: int = 1) -> int:
    """The smallest power of two >= max(n, minimum)."""
    return max(minimum, 1 << max(0, int(n) - 1).bit_length())


def dot_mode(dtype: torch.dtype) -> str:
    """How `mma` multiplies tiles of this dtype: "ieee" (exact fp32, no TF32) for float32,
    "upcast" for bfloat16 under the interpreter (its bf16 dot is wrong; products of bf16 are exact
    in fp32, so upcasting is what the GPU computes), "native" otherwise."""
    if dtype == torch.float32:
        return "ieee"
    return "upcast" if INTERPRET and dtype == torch.bfloat16 else "native"


@jit
def mma(a, b, DOT: tl.constexpr):
    """`tl.dot(a, b)` with float32 accumulation, in the mode chosen by `dot_mode`."""
    if DOT == "upcast":
        return tl.dot(a.to(tl.float32), b.to(tl.float32))
    elif DOT == "ieee":
        return tl.dot(a, b, input_precision="ieee")
    else:
        return tl.dot(a, b)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
