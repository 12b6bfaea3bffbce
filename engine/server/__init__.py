"""The engine's OpenAI-compatible HTTP server (FastAPI on uvicorn): `create_app(engine, config)`.

Routers live in their own files and are included by `app.create_app`; shared per-process state
(engine, limits, metrics, draining) is `state.ServerState`, reached from a route through
`state.get_state(request)`.
"""
