"""The one error the builders raise: a spec that cannot work, named the way status reports it."""

from __future__ import annotations

from enum import StrEnum

from llmop.operator.sizing.plan import SizingReason


class SpecCondition(StrEnum):
    """The status condition a SpecError sets: SizingValid False, or Degraded True."""

    SIZING_VALID = "SizingValid"
    DEGRADED = "Degraded"


class SpecReason(StrEnum):
    """Why a spec that passed the schema still cannot be built (sizing has its own reasons)."""

    INVALID_SPEC = "InvalidSpec"  # the operator cannot read it (e.g. written under an older CRD)
    INVALID_ENGINE_CONFIG = "InvalidEngineConfig"  # the engine's own schema rejects the config
    ADMIN_SECRET_CONFLICT = "AdminSecretConflict"  # <name>-admin exists and is not the operator's


class SpecError(ValueError):
    """A spec the operator cannot turn into objects: `condition` is the status condition it sets,
    `reason` its CamelCase reason, str() the message."""

    def __init__(self, condition: SpecCondition, reason: SpecReason | SizingReason, message: str):
        super().__init__(message)
        self.condition = condition
        self.reason = reason
