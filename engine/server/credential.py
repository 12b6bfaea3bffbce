"""The engine's one credential: who may use the admin API, and whose `priority` is honoured.

The operator mounts it from a Secret and names the file in `admin_token_file`; it is read once at
start-up (an unreadable or empty file stops the engine: an admin API without a credential must
not come up). Callers present it as `Authorization: Bearer <token>`, compared in constant time.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from pathlib import Path

from fastapi import Request

from llmop.engine.server.errors import APIError


class CredentialError(ValueError):
    """admin_token_file cannot be used; the message names the file, never its content."""


@dataclass(frozen=True)
class AdminCredential:
    token: bytes

    @classmethod
    def from_file(cls, path: str) -> "AdminCredential":
        try:
            token = Path(path).read_bytes().strip()
        except OSError as e:
            raise CredentialError(f"admin_token_file {path}: {e.strerror or e}") from None
        if len(token) < 16:
            raise CredentialError(f"admin_token_file {path}: the credential must have at least 16 characters")
        return cls(token)

    def presented_by(self, request: Request) -> bool:
        """Whether the request carries this credential as a bearer token."""
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self.token)


def check_admin(credential: AdminCredential | None, request: Request) -> None:
    """Refuse (401) a request that does not carry `credential` (None: nobody is admitted)."""
    if credential is None or not credential.presented_by(request):
        raise APIError(401, "the admin API needs the engine's admin credential as `Authorization: Bearer …`",
                       reason="unauthorized", code="invalid_admin_credential", headers={"WWW-Authenticate": "Bearer"})
