"""The admin API of LoRA adapters, and how adapters appear to clients.

POST /v1/adapters {name, source, pinned} reads and validates a PEFT directory (201, or 422 with
the reason: the adapter stays listed as `failed`), DELETE /v1/adapters/{name} unloads (409 while
requests use it), GET /v1/adapters lists every adapter with its state (loading, cpu, resident,
disk, failed + error). A request selects an adapter by naming it in `model`; /v1/models lists
each with `parent` = the base model.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response

from llmop.engine.config import AdapterSource
from llmop.engine.lora import admin
from llmop.engine.lora.registry import AdapterConflict, AdapterInfo, AdapterNotFound, AdapterState
from llmop.engine.server.errors import APIError
from llmop.engine.server.protocol import ModelCard
from llmop.engine.server.state import ServerState, get_state

router = APIRouter()


def adapter_json(info: AdapterInfo) -> dict:
    return {"name": info.name, "source": info.source, "state": info.state.value, "pinned": info.pinned,
            "slot": info.slot, "error": info.error}


def adapter_model_cards(state: ServerState) -> list[ModelCard]:
    """Servable adapters as models whose parent is the base model."""
    lora = state.engine.engine.lora
    return [ModelCard(id=i.name, root=i.source, parent=state.model_name, max_model_len=state.max_model_len)
            for i in lora.infos() if i.state is not AdapterState.FAILED]


def _not_found(name: str) -> APIError:
    return APIError(404, f"the adapter {name!r} does not exist", reason="unknown_model", code="adapter_not_found")


@router.post("/v1/adapters", status_code=201)
async def load_adapter(body: AdapterSource, state: ServerState = Depends(get_state)):
    state.check_open()
    if body.name in state.base_model_names():
        raise APIError(409, f"{body.name!r} is the base model's name", reason="invalid_request",
                       type="invalid_request_error", code="adapter_exists")
    try:
        info = await admin.load_adapter(state.engine, body.name, body.source, body.pinned)
    except AdapterConflict as e:
        raise APIError(409, str(e), reason="invalid_request", type="invalid_request_error",
                       code="adapter_exists") from None
    except ValueError as e:  # LoRA disabled (max_loras 0)
        raise APIError(400, str(e), reason="invalid_request") from None
    if info.state is AdapterState.FAILED:
        raise APIError(422, f"cannot load adapter {body.name!r}: {info.error}", reason="invalid_request",
                       type="invalid_request_error", param="source", code="adapter_invalid")
    return JSONResponse(adapter_json(info), status_code=201)


@router.delete("/v1/adapters/{name:path}")
async def unload_adapter(name: str, state: ServerState = Depends(get_state)):
    try:
        await admin.unload_adapter(state.engine, name)
    except AdapterNotFound:
        raise _not_found(name) from None
    except AdapterConflict as e:
        raise APIError(409, str(e), reason="invalid_request", type="invalid_request_error",
                       code="adapter_in_use") from None
    return Response(status_code=204)


@router.get("/v1/adapters")
async def list_adapters(state: ServerState = Depends(get_state)):
    return {"object": "list", "data": [adapter_json(i) for i in await admin.list_adapters(state.engine)]}
