"""Run-time adapter management through the async engine: what the admin API's routes call.

Reading an adapter from disk happens on a worker thread (the engine keeps stepping; the adapter
shows as `loading`); only registering it and moving slots happen on the engine thread, between
steps, through `AsyncEngine.call`.
"""

from __future__ import annotations

import asyncio

from llmop.engine.lora.registry import AdapterConflict, AdapterInfo, AdapterState


async def load_adapter(engine, name: str, source: str, pinned: bool = False, rank: int | None = None,
                       alpha: float | None = None) -> AdapterInfo:
    """Register, read and validate (and check the expected `rank` and `alpha` when given); returns
    the final info (state `failed` with the error if it does not fit: the caller decides how to
    report it). Raises AdapterConflict if it exists."""
    await engine.call(lambda e: e.lora.begin_load(name, source, pinned))
    lora = engine.engine.lora
    try:
        adapter = await asyncio.to_thread(lora.read, name, source)
        msg = adapter.mismatch(rank, alpha)
    except Exception as err:
        msg = str(err)
    if msg is not None:
        return await engine.call(lambda e: e.lora.fail_load(name, msg))
    return await engine.call(lambda e: e.lora.finish_load(name, adapter))


async def unload_adapter(engine, name: str) -> None:
    """Unregister; AdapterNotFound if unknown, AdapterConflict while requests use it."""
    await engine.call(lambda e: e.lora.remove(name))


async def drop_failed(engine, name: str) -> None:
    """Unregister `name` if its load failed; kept (FAILED) while requests for it still wait."""
    def drop(e) -> None:
        if e.lora.enabled and e.lora.registry.state_of(name) is AdapterState.FAILED:
            try:
                e.lora.remove(name)
            except AdapterConflict:
                pass

    await engine.call(drop)


async def list_adapters(engine) -> list[AdapterInfo]:
    return await engine.call(lambda e: e.lora.infos())
