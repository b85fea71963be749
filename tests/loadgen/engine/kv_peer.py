"""A hostile "prefill server" for the decode server's tests: it answers ``GET /kv/{id}`` with whatever a test staged.

Run as ``python -m tests.loadgen.engine.kv_peer``; prints ``READY http://127.0.0.1:PORT``. A test stages an answer
with ``PUT /stage/{id}`` (the body is the answer's bytes; ``?status=N`` its status, ``?location=URL`` a
``Location`` header: a redirect), then names this server as a decode request's ``remote_host``/``remote_port``
and ``{id}`` as its ``remote_request_id``. Every other request (any method, any path) is logged and, unless
staged, answered 404; ``GET /contacts`` lists the logged requests' paths (the log's own routes not included), so
a test can prove the decode server never reached it. It computes nothing: the tests build the bytes with the
real wire format (loadgen/engine/kvwire.py).
"""

from __future__ import annotations

from aiohttp import web

from tests.loadgen.serve_app import run, serve

STAGED = web.AppKey("staged", dict[str, tuple[int, bytes, str | None]])
CONTACTS = web.AppKey("contacts", list[str])


async def stage(request: web.Request) -> web.Response:
    status = int(request.query.get("status", "200"))
    request.app[STAGED][request.match_info["id"]] = (status, await request.read(), request.query.get("location"))
    return web.Response(status=204)


async def contacts(request: web.Request) -> web.Response:
    return web.json_response(request.app[CONTACTS])


async def anything(request: web.Request) -> web.Response:
    request.app[CONTACTS].append(request.path_qs)
    staged = request.app[STAGED].get(request.path.removeprefix("/kv/")) if request.path.startswith("/kv/") else None
    if staged is None:
        return web.Response(status=404, text=f"nothing staged at {request.path}")
    status, body, location = staged
    headers = {"Location": location} if location else {}
    return web.Response(status=status, body=body, headers=headers, content_type="application/octet-stream")


async def main() -> None:
    app = web.Application(client_max_size=1 << 30)
    app[STAGED] = {}
    app[CONTACTS] = []
    app.router.add_put("/stage/{id}", stage)
    app.router.add_get("/contacts", contacts)
    app.router.add_route("*", "/{tail:.*}", anything)
    await serve(app)


if __name__ == "__main__":
    run(main)
