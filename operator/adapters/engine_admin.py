"""The operator's client of one engine pod's admin API (engine/server/adapters_api.py).

Plain HTTP to the pod IP on the admin port, with the admin credential as a bearer token; each call
has a timeout so an unresponsive pod cannot hold a placement pass for long. Errors come back as
`AdminError` with the engine's message (the OpenAI error body's `message`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from llmop.operator.adapters.binding import ManifestEntry

LIST_TIMEOUT_S = 5.0  # a pod that does not answer a listing holds a placement pass no longer
LOAD_TIMEOUT_S = 30.0  # reading an adapter's weights from a volume


class AdminError(Exception):
    """A call failed: `status` is the HTTP status (0: no answer), the message the engine's."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class EngineAdmin:
    """The admin API of one pod."""

    host: str
    port: int
    token: str

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
              timeout: float = LIST_TIMEOUT_S) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://{self.host}:{self.port}{path}", data=data, method=method,
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise AdminError(err.code, _message(err.read())) from None
        except (urllib.error.URLError, OSError) as err:
            raise AdminError(0, f"no answer from {self.host}:{self.port}: {getattr(err, 'reason', err)}") from None
        return json.loads(raw) if raw else {}

    def list(self) -> list[dict[str, Any]]:
        """Every adapter the engine knows, with its state (and error when failed): the registered
        ones, and the manifest's entries that failed at start-up (as state `failed`)."""
        body = self._call("GET", "/v1/adapters")
        failed = [{"name": f["name"], "source": f.get("source"), "state": "failed", "error": f.get("error", "")}
                  for f in body.get("failed", []) if f.get("name")]  # fmt: skip
        return [*body.get("data", []), *failed]

    def load(self, entry: ManifestEntry) -> dict[str, Any]:
        return self._call("POST", "/v1/adapters", entry.wire(), LOAD_TIMEOUT_S)

    def unload(self, name: str) -> None:
        try:
            self._call("DELETE", "/v1/adapters/" + name)
        except AdminError as err:
            if err.status != 404:  # gone already
                raise


def _message(raw: bytes) -> str:
    try:
        return str(json.loads(raw)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return raw.decode(errors="replace")[:500]
