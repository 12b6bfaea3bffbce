"""The operator image has no torch: importing every operator module must not pull it in."""

import subprocess
import sys

MODULES = [
    "llmop.operator.handlers", "llmop.operator.cli", "llmop.operator.sizing_cli", "llmop.operator.crdgen",
    "llmop.operator.build.desired", "llmop.operator.reconcile.reconciler",
]  # fmt: skip


def test_operator_never_imports_torch():
    code = "import sys\n" + "".join(f"import {m}\n" for m in MODULES) + "print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
