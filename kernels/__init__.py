"""Triton kernels for the engine, each beside a plain-torch reference of the same function.

One file per op (`reshape_and_cache`, `paged_attention_decode`, `paged_attention_prefill`, `lora`),
each with the `<op>_kernel` Triton function, a wrapper that checks and launches it, and `ref_<op>`,
the torch reference that the CPU engine runs.  `registry.get_attention_ops` / `get_lora_ops` pick
"triton", "torch" or "auto" (Triton on CUDA tensors).  Importing this package imports nothing heavy.
"""


def get_attention_ops(name="auto", device=None):
    """See `llmop.kernels.registry.get_attention_ops`."""
    from .registry import get_attention_ops as get

    return get(name, device)


def get_lora_ops(name="auto", device=None):
    """See `llmop.kernels.registry.get_lora_ops`."""
    from .registry import get_lora_ops as get

    return get(name, device)
