"""The engine's two middlewares: who may call it at all, and aiohttp's own errors in the OpenAI shape.

Why this module exists: every route (generation, the cache reset, the side channel) passes through the same two
checks before its handler runs; they know nothing of the routes. Another web page or a DNS-rebound name may not
reset the cache or add load (``loadgen.core.web_guard``): 403. aiohttp's 404/405 become ``{"error": ...}`` bodies.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from loadgen.core.web_guard import foreign_request
from loadgen.engine.protocol import ApiError


def error_response(err: ApiError) -> web.Response:
    return web.Response(body=orjson.dumps(err.body()), status=err.status, content_type="application/json")


BIND_HOST_KEY = web.AppKey("bind_host", str)


@web.middleware
async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
    """Another web page, or a DNS-rebound name, may not reset the cache or add load (``loadgen.core.web_guard``)."""
    why = foreign_request(
        bind_host=request.app[BIND_HOST_KEY],
        scheme=request.scheme,
        host=request.host,
        method=request.method,
        origin=request.headers.get("Origin"),
        referer=request.headers.get("Referer"),
        server="this engine",
    )
    if why is not None:
        return error_response(ApiError(403, why))
    response: web.StreamResponse = await handler(request)
    return response


@web.middleware
async def errors_as_json(request: web.Request, handler: Any) -> web.StreamResponse:
    """aiohttp's own 404/405 become OpenAI-shaped JSON errors."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(ApiError(exc.status, f"{exc.reason}: {request.method} {request.path}"))
