"""`llmop size` end to end as a subprocess: output and exit status."""

import subprocess
import sys


def _size(*args):
    return subprocess.run([sys.executable, "-m", "llmop.cli", "size", *args], capture_output=True, text=True)


def test_prints_plan():
    out = _size("--model", "llama-3-70b", "--concurrency", "100", "--context-length", "4096")
    assert out.returncode == 0, out.stderr
    assert "KV per token 2 × 80 layers × 8 KV heads × 128 × 2 B = 320.00 KiB" in out.stdout
    assert "tensor parallel size 4" in out.stdout


def test_reports_why_nothing_fits():
    out = _size("--model", "llama-3-70b", "--concurrency", "100", "--context-length", "4096", "--gpus-per-node", "2")
    assert out.returncode == 1
    assert "needs 4 GPUs of 80.00 GiB per node; nodes have 2" in out.stdout
