"""The operator's client of one engine pod's admin API (engine/server/adapters_api.py).

Plain HTTP to the pod IP on the admin port, with the admin credential as a bearer token; each call
has a timeout so an unresponsive pod cannot hold a placement pass for long. Errors come back as
`AdminError` with the engine's message (the OpenAI error body's `message`).
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from llmop.operator.adapters.binding import ManifestEntry

LIST_TIMEOUT_S = 5.0  # a pod that does not answer a listing holds a placement pass no longer
LOAD_TIMEOUT_S = 30.0  # reading an adapter's weights from a volume


class AdminError(Exception):
    """A call failed: `status` is the HTTP status (0: no usable answer), `code` the engine's error
    code (its OpenAI error body's `code`), the message the engine's."""

    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class EngineAdmin:
    """The admin API of one pod."""

    host: str
    port: int
    token: str = field(repr=False)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              timeout: float = LIST_TIMEOUT_S) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://{self.host}:{self.port}{path}", data=data, method=method,
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
            return json.loads(raw) if raw else {}
        except urllib.error.HTTPError as err:
            raise AdminError(err.code, *_error(err.read())) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as err:
            raise AdminError(0, f"no usable answer from {self.host}:{self.port}: {getattr(err, 'reason', err)}") from None

    def list(self) -> list[dict[str, Any]]:
        """Every adapter the engine knows, with its state (and error when failed): the registered
        ones, and the manifest's entries that failed at start-up (as state `failed`)."""
        body = self._call("GET", "/v1/adapters")
        if not isinstance(body.get("data"), list) or not isinstance(body.get("failed", []), list):
            raise AdminError(0, f"{self.host}:{self.port} answered GET /v1/adapters with no adapter listing")
        failed = [{"name": f["name"], "source": f.get("source"), "state": "failed", "error": f.get("error", "")}
                  for f in body.get("failed", []) if isinstance(f, dict) and f.get("name")]  # fmt: skip
        return [a for a in body["data"] if isinstance(a, dict)] + failed

    def load(self, entry: ManifestEntry) -> dict[str, Any]:
        return self._call("POST", "/v1/adapters", entry.wire(), LOAD_TIMEOUT_S)

    def unload(self, name: str) -> None:
        try:
            self._call("DELETE", "/v1/adapters/" + name)
        except AdminError as err:
            if err.status != 404:  # gone already
                raise


def _error(raw: bytes) -> tuple[str, str | None]:
    """(message, code) of an OpenAI error body; the raw text when it is not one."""
    try:
        error = json.loads(raw)["error"]
        return str(error["message"]), error.get("code")
    except (ValueError, KeyError, TypeError):
        return raw.decode(errors="replace")[:500], None
