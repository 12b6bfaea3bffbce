"""Restoring the adapter manifest at start-up: every entry as a POST /v1/adapters of it, before ready.

The server is up (liveness answers) while this runs on the event loop; readiness waits for it
(`ManifestStatus.restored`), so a restarted pod takes traffic only once its tenants' adapters are
back. Each entry goes through `adapters_api.load` — the roots, the name and the adapter are checked
exactly as for the admin API — and one that is refused becomes a `FailedAdapter` with the engine's
message. A failed entry is not left registered: it is reported once, under `failed`, and requests
naming it get the 404 of any unknown model.
"""

from __future__ import annotations

import logging

from llmop.engine.config import AdapterLoad
from llmop.engine.lora import admin
from llmop.engine.server import adapters_api
from llmop.engine.server.adapter_manifest import FailedAdapter, read_manifest
from llmop.engine.server.errors import APIError
from llmop.engine.server.state import ServerState

log = logging.getLogger("llmop.server")


async def _restore_one(state: ServerState, entry: AdapterLoad) -> FailedAdapter | None:
    try:
        await adapters_api.load(state, entry)
        return None
    except APIError as err:
        if err.code == adapters_api.ADAPTER_INVALID:  # registered, then failed reading: unregister it
            await admin.drop_failed(state.engine, entry.name)
        return FailedAdapter(entry.name, entry.source, err.message)
    except Exception as err:  # a bug must not keep the pod from ever being ready
        log.exception("restoring adapter %r failed unexpectedly", entry.name)
        return FailedAdapter(entry.name, entry.source, f"{type(err).__name__}: {err}")


async def restore_adapters(state: ServerState) -> None:
    """Load the manifest's adapters one by one, record each failure, then mark the state restored."""
    status = state.manifest
    try:
        manifest = read_manifest(status.path)
        status.error = manifest.error
        if manifest.error is not None:
            log.error("adapter manifest not used, no adapters restored: %s", manifest.error)
        failures = list(manifest.refused)
        status.failed.extend(manifest.refused)
        for entry in manifest.entries:
            failure = await _restore_one(state, entry)
            if failure is not None:
                failures.append(failure)
                status.failed.append(failure)
        for f in failures:
            log.error("adapter %r from the manifest is not served: %s", f.name, f.error)
        total = len(manifest.entries) + len(manifest.refused)
        log.info("adapter manifest %s: %d of %d adapters restored", status.path, total - len(failures), total)
    finally:
        status.restored = True
