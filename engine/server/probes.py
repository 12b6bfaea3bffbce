"""GET /health (liveness), /ready (readiness), /metrics (Prometheus), /v1/models.

Liveness stays 200 while draining (the process is fine, just leaving); readiness turns 503 as
soon as a drain starts, so the Service stops routing new requests here. Readiness also waits for
the adapter manifest's adapters (`adapter_restore`): a restarted pod takes traffic with them back.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from llmop.engine.lora.registry import AdapterState
from llmop.engine.server.protocol import ModelCard, ModelList
from llmop.engine.server.state import ServerState, get_state

router = APIRouter()


@router.get("/health", responses={503: {"description": "The engine stopped or failed"}})
async def health(state: ServerState = Depends(get_state)):
    if not state.engine.is_running:
        reason = state.engine.failure
        return JSONResponse({"status": "engine failed" if reason else "engine stopped", "reason": reason},
                            status_code=503)
    return {"status": "ok"}


@router.get("/ready", responses={503: {"description": "Not ready, or draining"}})
async def ready(state: ServerState = Depends(get_state)):
    if not state.ready:
        return JSONResponse({"ready": False, "draining": state.draining,
                             "restoring_adapters": not state.manifest.restored}, status_code=503)
    return {"ready": True}


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(state: ServerState = Depends(get_state)):
    return Response(state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


def adapter_model_cards(state: ServerState) -> list[ModelCard]:
    """Servable adapters as models whose parent is the base model; by name only (their host paths
    are for the admin API)."""
    return [ModelCard(id=i.name, root=i.name, parent=state.model_name, max_model_len=state.max_model_len)
            for i in state.engine.engine.lora.infos() if i.state is not AdapterState.FAILED]


def model_cards(state: ServerState) -> list[ModelCard]:
    """The models a client may name: the base model, then the LoRA adapters (parent: the base)."""
    return [ModelCard(id=state.model_name, root=str(state.config.model or state.model_name),
                      max_model_len=state.max_model_len), *adapter_model_cards(state)]


@router.get("/v1/models", response_model=ModelList)
async def list_models(state: ServerState = Depends(get_state)):
    return ModelList(data=model_cards(state))
