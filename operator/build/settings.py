"""What the operator installation decides for every LLMDeployment: images, its field manager, and
the namespace it runs in (the NetworkPolicy admits its pods there to the engine's admin port).

Set by the Helm chart through environment variables, so the builders stay pure functions of
(spec, settings).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_ENGINE_IMAGE = "ghcr.io/llmop/engine:0.1.0"
DEFAULT_S3_IMAGE = "amazon/aws-cli:2.17.0"
DEFAULT_OPERATOR_NAMESPACE = "llmop-system"


@dataclass(frozen=True)
class Settings:
    """Operator-wide defaults the builders read."""

    engine_image: str = DEFAULT_ENGINE_IMAGE
    s3_image: str = DEFAULT_S3_IMAGE  # downloader for s3:// sources (hf:// uses the engine image)
    field_manager: str = "llmop"
    operator_namespace: str = DEFAULT_OPERATOR_NAMESPACE  # the chart's pod: its own (downward API)

    @classmethod
    def from_env(cls) -> "Settings":
        """LLMOP_ENGINE_IMAGE, LLMOP_S3_IMAGE, LLMOP_FIELD_MANAGER, POD_NAMESPACE (as the
        chart sets them)."""
        return cls(
            engine_image=os.environ.get("LLMOP_ENGINE_IMAGE") or DEFAULT_ENGINE_IMAGE,
            s3_image=os.environ.get("LLMOP_S3_IMAGE") or DEFAULT_S3_IMAGE,
            field_manager=os.environ.get("LLMOP_FIELD_MANAGER") or "llmop",
            operator_namespace=os.environ.get("POD_NAMESPACE") or DEFAULT_OPERATOR_NAMESPACE,
        )
