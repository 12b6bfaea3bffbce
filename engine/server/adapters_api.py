"""The admin API of LoRA adapters; it is served only on the admin listener (`admin_app`).

POST /v1/adapters {name, source, pinned, root, rank, alpha} reads and validates a PEFT directory
inside the `adapter_roots`, and inside `root` when given (201; 400 for a name that is neither a
plain name nor `<namespace>/<name>`; 403 for a source outside the roots or the root, with the same
message whether or not it exists; 422 with the reason when it is not a servable adapter, or not
the `rank`/`alpha` the body expects: it stays listed as `failed`), DELETE /v1/adapters/{name}
unloads (409 while requests use it), GET /v1/adapters lists every registered adapter with its state
(loading, cpu, resident, disk, failed + error) and its host path in `data`, the adapter manifest's
entries that did not load at start-up in `failed`, and the manifest's own state in `manifest`
(`adapter_manifest`). Clients of the inference port see servable adapters only by name, in
/v1/models. `load` is the one way an adapter gets in: the routes and the start-up restore use it.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response

from llmop.engine.config import AdapterLoad
from llmop.engine.lora import admin
from llmop.engine.lora.registry import AdapterConflict, AdapterInfo, AdapterNotFound, AdapterState
from llmop.engine.lora.roots import AdapterRoots, SourceOutsideRoots
from llmop.engine.server.errors import APIError
from llmop.engine.server.state import ServerState, get_state

router = APIRouter()

ADAPTER_INVALID = "adapter_invalid"  # the error code of a source that is not a servable adapter (422)


def adapter_json(info: AdapterInfo) -> dict:
    return {"name": info.name, "source": info.source, "state": info.state.value, "pinned": info.pinned,
            "slot": info.slot, "error": info.error}


def _not_found(name: str) -> APIError:
    return APIError(404, f"the adapter {name!r} does not exist", reason="unknown_model", code="adapter_not_found")


def _allowed_source(state: ServerState, body: AdapterLoad) -> str:
    """The real path of the source inside the adapter roots (and inside `root`, itself inside
    them, when given), else 403."""
    try:
        roots = AdapterRoots.of(state.config.adapter_roots)
        if body.root is not None:
            roots = AdapterRoots.of([roots.resolve(body.root)])
        return roots.resolve(body.source)
    except SourceOutsideRoots as e:
        raise APIError(403, str(e), reason="forbidden", param="source", code="source_not_allowed") from None


async def load(state: ServerState, body: AdapterLoad) -> AdapterInfo:
    """Load `body` as the admin API does; APIError with the status and reason if it is refused.
    Once registered (loaded, or failed on reading: 422), the name's start-up failure is superseded."""
    state.check_open()
    source = _allowed_source(state, body)
    if body.name in state.base_model_names():
        raise APIError(409, f"{body.name!r} is the base model's name", reason="invalid_request",
                       type="invalid_request_error", code="adapter_exists")
    try:
        info = await admin.load_adapter(state.engine, body.name, source, body.pinned, body.rank, body.alpha)
    except AdapterConflict as e:
        raise APIError(409, str(e), reason="invalid_request", type="invalid_request_error",
                       code="adapter_exists") from None
    except ValueError as e:  # LoRA disabled (max_loras 0)
        raise APIError(400, str(e), reason="invalid_request") from None
    state.manifest.forget(body.name)
    if info.state is AdapterState.FAILED:
        raise APIError(422, f"cannot load adapter {body.name!r}: {info.error}", reason="invalid_request",
                       type="invalid_request_error", param="source", code=ADAPTER_INVALID)
    return info


@router.post("/v1/adapters", status_code=201)
async def load_adapter(body: AdapterLoad, state: ServerState = Depends(get_state)):
    return JSONResponse(adapter_json(await load(state, body)), status_code=201)


@router.delete("/v1/adapters/{name:path}")
async def unload_adapter(name: str, state: ServerState = Depends(get_state)):
    """Unload `name`; for a manifest entry that failed at start-up, forget its failure."""
    try:
        await admin.unload_adapter(state.engine, name)
    except AdapterNotFound:
        if not state.manifest.forget(name):
            raise _not_found(name) from None
    except AdapterConflict as e:
        raise APIError(409, str(e), reason="invalid_request", type="invalid_request_error",
                       code="adapter_in_use") from None
    return Response(status_code=204)


@router.get("/v1/adapters")
async def list_adapters(state: ServerState = Depends(get_state)):
    return {"object": "list", "data": [adapter_json(i) for i in await admin.list_adapters(state.engine)],
            "failed": [f.to_json() for f in state.manifest.failed], "manifest": state.manifest.to_json()}
