"""Tensor-parallel sizing from a KV budget: pure, torch-free arithmetic with every term reported.

`plan.size()` does the arithmetic on plain numbers; `from_spec.plan_for()` reads an LLMDeploymentSpec;
`report.render()` prints the plan for `llmop size` and the status message.
"""

from llmop.operator.sizing.architecture import Accelerator, Architecture
from llmop.operator.sizing.draft import DraftRequest
from llmop.operator.sizing.plan import Candidate, SizingError, SizingPlan, SizingRequest, size

__all__ = [
    "Accelerator",
    "Architecture",
    "Candidate",
    "DraftRequest",
    "SizingError",
    "SizingPlan",
    "SizingRequest",
    "size",
]
