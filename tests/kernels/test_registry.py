"""The backend registry: names resolve to the right functions; the torch path needs no Triton."""

import subprocess
import sys

import pytest
import torch

from llmop.kernels import lora, paged_attention_decode, paged_attention_prefill, reshape_and_cache
from llmop.kernels.registry import get_attention_ops, get_lora_ops


def test_named_backends_resolve_to_the_op_modules():
    t = get_attention_ops("triton")
    r = get_attention_ops("torch")
    assert t.decode is paged_attention_decode.paged_attention_decode
    assert r.decode is paged_attention_decode.ref_paged_attention_decode
    assert t.prefill is paged_attention_prefill.paged_attention_prefill
    assert r.reshape_and_cache is reshape_and_cache.ref_reshape_and_cache
    assert get_lora_ops("torch").shrink is lora.ref_lora_shrink
    assert get_lora_ops("triton").expand is lora.lora_expand
    assert get_attention_ops("auto", device="cpu").prefill is paged_attention_prefill.ref_paged_attention_prefill
    assert get_lora_ops("auto", device="cuda").shrink is lora.lora_shrink
    with pytest.raises(ValueError):
        get_attention_ops("cuda")


def test_auto_runs_the_reference_on_cpu_tensors(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("the Triton op must not run on CPU tensors under 'auto'")

    monkeypatch.setattr(lora, "lora_shrink", boom)
    ops = get_lora_ops("auto")
    x, a = torch.randn(3, 16), torch.randn(2, 4, 16)
    slot = torch.tensor([0, -1, 1], dtype=torch.int32)
    h = ops.shrink(x, a, slot, out=torch.zeros(3, 4))
    torch.testing.assert_close(h, lora.ref_lora_shrink(x, a, slot, out=torch.zeros(3, 4)))


def test_torch_backend_works_without_triton():
    code = (
        "import sys; sys.modules['triton'] = None\n"  # makes `import triton` fail
        "import torch\n"
        "from llmop.kernels.registry import get_attention_ops\n"
        "ops = get_attention_ops('auto')\n"
        "kc = torch.randn(2, 4, 1, 8); q = torch.randn(1, 2, 8)\n"
        "out = ops.decode(q, kc, kc, torch.tensor([[1, 0]], dtype=torch.int32), torch.tensor([5], dtype=torch.int32))\n"
        "assert out.isfinite().all()\n"
        "try:\n    get_attention_ops('triton')\nexcept RuntimeError as e:\n    print('refused:', e)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "refused" in res.stdout
