"""`spec.networkPolicy`: the NetworkPolicy the operator renders beside the engine pods."""

from __future__ import annotations

from pydantic import Field

from llmop.operator.api.base import CRDModel


class NetworkPolicySpec(CRDModel):
    """Whether the operator renders the engine pods' NetworkPolicy (build/network_policy.py)."""

    enabled: bool = Field(
        True,
        description=(
            "Render the NetworkPolicy (named after the LLMDeployment). false: none, and one rendered "
            "earlier is deleted; for clusters whose own policies already govern the namespace."
        ),
    )
