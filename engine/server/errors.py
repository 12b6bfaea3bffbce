"""Every rejection leaves as an OpenAI error body, `{"error": {message, type, param, code}}`.

Routes raise `APIError`; FastAPI's own failures (422 validation, invalid JSON, unknown route,
wrong method) and unexpected exceptions are converted by the handlers installed here, so a client
(the openai SDK maps status codes to exception classes) never sees another shape. Each rejection
carries a bounded `reason` for `llmop_request_rejected_total`. `ERROR_RESPONSES` documents that body in
the OpenAPI document, in place of FastAPI's 422 (which this server never sends).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from llmop.engine.server.protocol import ErrorResponse

log = logging.getLogger("llmop.server")

# `responses=` of a route that can refuse: any 4xx (400, 404, 413, 429 ...) or a 503 (draining, queue
# timeout) carries an OpenAI error body. A "4XX" entry also keeps FastAPI from documenting its 422.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"description": "Refused: an OpenAI error body", "model": ErrorResponse},
    503: {"description": "Draining, or the request waited too long in the queue", "model": ErrorResponse},
}

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 405: "invalid_request_error", 408: "timeout_error",
          413: "invalid_request_error", 429: "rate_limit_error", 503: "service_unavailable_error"}


class APIError(Exception):
    """A request the server refuses; `reason` labels the rejection counter (bounded set)."""

    def __init__(self, status: int, message: str, *, reason: str, param: str | None = None,
                 code: str | None = None, type: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(status, "server_error")
        self.headers = headers or {}


def error_body(status: int, message: str, type: str | None = None, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type or _TYPES.get(status, "server_error"),
                      "param": param, "code": code}}


def error_response(err: APIError) -> JSONResponse:
    return JSONResponse(error_body(err.status, err.message, err.type, err.param, err.code),
                        status_code=err.status, headers=err.headers)


# Parts of a pydantic error location that name a union member rather than a field
# ("str", "list[ContentPart]", "function-after[...]", a model's class name).
_UNION_MEMBER = re.compile(r"^([A-Z]\w*|str|int|float|bool|none|(list|dict|literal|function-\w+|tagged-union)\[.*\])$")


def _param(loc) -> list[str]:
    return [str(p) for p in loc if p != "body" and not _UNION_MEMBER.match(str(p))]


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None, str]:
    """(message, param, reason) of a validation failure; `param` is the field's path (for a
    union that matched no member, the union field itself)."""
    errors = exc.errors()
    if not errors:
        return "invalid request", None, "invalid_request"
    first = errors[0]
    if first.get("type") == "json_invalid":
        return f"invalid JSON body: {first.get('ctx', {}).get('error', first.get('msg'))}", None, "invalid_json"
    unknown = [e for e in errors if e.get("type") == "extra_forbidden"]
    if unknown:
        param = ".".join(_param(unknown[0].get("loc", ())))
        return (f"unknown field {param!r}: this server refuses fields it does not know rather than ignore "
                f"them (docs/server.md lists the fields it accepts)"), param, "unknown_field"
    tags = [e for e in errors if e.get("type") == "union_tag_invalid"]
    if tags:
        discriminator = tags[0].get("ctx", {}).get("discriminator", "'type'").strip("'")
        param = ".".join(_param(tags[0].get("loc", ())) + [discriminator])
        return f"{param}: {tags[0].get('msg')}", param, "unsupported"
    locs = [_param(e.get("loc", ())) for e in errors]
    common = locs[0]
    for loc in locs[1:]:
        n = 0
        while n < min(len(common), len(loc)) and common[n] == loc[n]:
            n += 1
        common = common[:n]
    param = ".".join(common) or None
    msg = first.get("msg", "invalid value")
    if first.get("type") == "missing" and len(errors) == 1:
        if param is None:
            return "the request has no body: send a JSON object", None, "invalid_request"
        return f"missing required field {param!r}", param, "invalid_request"
    if first.get("type") == "model_attributes_type" or not param:
        return f"the body must be a JSON object: {msg}", param, "invalid_request"
    detail = msg if len(errors) == 1 else f"no accepted type matched ({msg}, ...)"
    return f"{param}: {detail}", param, "invalid_request"


def install_error_handlers(app: FastAPI, on_reject: Callable[[str], None]) -> None:
    """Make every error an OpenAI error body; `on_reject(reason)` counts the rejections."""

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        on_reject(exc.reason)
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        message, param, reason = _validation_message(exc)
        on_reject(reason)
        return JSONResponse(error_body(400, message, param=param), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        return JSONResponse(error_body(exc.status_code, str(exc.detail)), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unhandled error on %s", request.url.path)
        return JSONResponse(error_body(500, "internal server error", type="server_error"), status_code=500)
