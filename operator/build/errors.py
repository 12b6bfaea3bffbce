"""The one error the builders raise: a spec that cannot work, named the way status reports it."""

from __future__ import annotations


class SpecError(ValueError):
    """A spec the operator cannot turn into objects. `condition` is the status condition it sets
    False (SizingValid) or True (Degraded), `reason` its CamelCase reason, str() the message."""

    def __init__(self, condition: str, reason: str, message: str):
        super().__init__(message)
        self.condition = condition
        self.reason = reason
