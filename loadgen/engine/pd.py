"""HTTP side of the prefill and decode roles: role checks, the side channel, and the decode server's fetch.

Why this module exists: with vllm-router in front (``--vllm-pd-disaggregation``), a request reaches a prefill
server with ``kv_transfer_params.do_remote_decode`` and ``max_tokens`` 1, then a decode server with the
prefill answer's ``kv_transfer_params`` (loadgen/engine/handoff.py). The prefill server keeps the prompt's KV
(its own prefill's arrays, loadgen/engine/kvwire.py) in a bounded, expiring store
(loadgen/engine/transfers.py) and serves it once on ``GET /kv/{transfer_id}`` of its own HTTP port, which its
answer names as ``remote_host``/``remote_port``. The decode server fetches it there under a deadline and hands
it to the scheduler, which decodes from it. A fetch that fails (server down, an HTTP error, a timeout, bytes
that are not a KV of this model and prompt) is an :class:`ApiError` whose message names the prefill server;
the router passes a decode server's error through to its client unchanged. A server asked for a leg its
``--role`` does not serve answers 400 naming its role. The server (loadgen/engine/server.py) calls in here;
nothing here computes.

The fetch is a request this server makes on a client's say-so, so it goes only where the operator said:
to a prefill server ``--kv-peers`` named at start (``self``: this server's own side channel, for one engine
that is its own prefiller), never elsewhere (a decode leg naming another address is a 400, and no byte
leaves); without ``--kv-peers`` a server fetches nothing. It follows no redirect, and its error answer
holds no byte of what the peer sent: an error kind (an HTTP status, a known reason of this engine's own
side channel, the part of the KV that is wrong) and the peer as configured. Otherwise any client could
make the engine a port scanner of its network, and read the answers back.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import quote

import aiohttp
import orjson
from aiohttp import web

from loadgen.engine.handoff import FIELD, KVTransfer, RemotePrefill, parse_kv_transfer, prefill_answer_params
from loadgen.engine.kvwire import MAX_HEADER_BYTES, HandedKV, KVWireError, ModelShape, Origin, decode, encode
from loadgen.engine.protocol import ApiError
from loadgen.engine.transfers import TransferStore

ROLES: Final = ("both", "prefill", "decode")
SELF: Final = "self"  # a ``--kv-peers`` entry: this server's own side channel (one engine, its own prefiller)
_SNIPPET: Final = 300
# What this engine's side channel says of a transfer it no longer has (loadgen/engine/transfers.py, side_channel):
# the only words of a peer's error body an error answer repeats, and only from this list.
_GONE: Final = ("already fetched", "expired", "evicted", "no such transfer", "asked of engine")


def advertised_host(host: str) -> str:
    """The address a prefill answer names for a server bound to ``host``: a wildcard host advertises 127.0.0.1."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def parse_peers(values: list[str]) -> tuple[str, ...]:
    """``--kv-peers`` (given once or more, each comma-separated) as ``host:port`` entries and ``self``;
    raises ValueError naming a bad entry."""
    peers: list[str] = []
    for entry in (e.strip() for value in values for e in value.split(",")):
        if not entry:
            continue
        if entry != SELF:
            host, _, port = entry.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"--kv-peers entry {entry!r} is not HOST:PORT (or {SELF!r})")
            entry = f"{host.lower()}:{int(port)}"
        peers.append(entry)
    return tuple(dict.fromkeys(peers))


def new_engine_id() -> str:
    return f"loadgen-{uuid.uuid4().hex[:12]}"


@dataclass
class PDConfig:
    """A server's part in a prefill/decode pair. ``host``/``port`` are what a prefill answer advertises as
    ``remote_host``/``remote_port`` (the server's own address; the port is set once it is bound)."""

    role: str = "both"
    engine_id: str = field(default_factory=new_engine_id)
    seed: int = 0
    batch_invariant: bool = False
    fetch_timeout_s: float = 10.0
    transfer_ttl_s: float = 60.0
    transfer_max_bytes: int = 256 << 20
    host: str = "127.0.0.1"
    port: int = 0
    peers: tuple[str, ...] = ()  # the prefill servers a decode leg may fetch from: ``host:port`` or ``self``

    def peer(self, host: str, port: int) -> str | None:
        """``host:port`` when ``--kv-peers`` named it (``self`` names this server's advertised address)."""
        named = f"{host.lower()}:{port}"
        mine = f"{self.host.lower()}:{self.port}"
        return named if named in self.peers or (named == mine and SELF in self.peers) else None


PD_KEY = web.AppKey("pd", PDConfig)
STORE_KEY = web.AppKey("transfers", TransferStore)
CLIENT_KEY = web.AppKey("kv_client", aiohttp.ClientSession)


def install(app: web.Application, cfg: PDConfig) -> None:
    """The side channel route, the store, and (a server with ``--kv-peers``) the client the fetches go through."""
    app[PD_KEY] = cfg
    app[STORE_KEY] = TransferStore(cfg.transfer_ttl_s, cfg.transfer_max_bytes)
    app.router.add_get("/kv/{transfer_id}", side_channel)
    if cfg.peers:
        app.cleanup_ctx.append(_client)


async def _client(app: web.Application) -> AsyncIterator[None]:
    app[CLIENT_KEY] = aiohttp.ClientSession(auto_decompress=False)
    yield
    await app[CLIENT_KEY].close()


def transfer_of(app: web.Application, body: object, stream: bool, prompts: int) -> KVTransfer | None:
    """The request's ``kv_transfer_params``, checked against this server's role and the request (one choice: one
    prompt and n of 1, given as ``prompts``; a prefill leg unstreamed); raises :class:`ApiError`."""
    value = body.get(FIELD) if isinstance(body, dict) else None
    role = app[PD_KEY].role
    if isinstance(value, dict) and value.get("do_remote_decode") is True and role == "decode":
        raise ApiError(400, f"this server is a decode server (--role decode); it refuses '{FIELD}.do_remote_decode'")
    if isinstance(value, dict) and value.get("do_remote_prefill") is True and role == "prefill":
        raise ApiError(400, f"this server is a prefill server (--role prefill); it refuses '{FIELD}.do_remote_prefill'")
    transfer = parse_kv_transfer(value)
    if transfer is None:
        return None
    if prompts > 1:  # one transfer id, one KV, one prompt's ids to check: a hand-over is of one prompt
        raise ApiError(
            400, f"'{FIELD}' needs a single prompt; this request has {prompts} (a prompt list, or n > 1)", FIELD
        )
    if transfer.hand_over and stream:
        raise ApiError(400, f"'{FIELD}.do_remote_decode' needs stream false: the KV's address rides on the one answer")
    remote = transfer.fetch_from
    if remote is not None and app[PD_KEY].peer(remote.host, remote.port) is None:
        named = app[PD_KEY].peers
        why = f"{remote.host}:{remote.port} is not among the {len(named)} that --kv-peers names"
        why = why if named else "it was started without --kv-peers"
        where = f"{FIELD}.remote_host"
        raise ApiError(400, f"this server fetches KV only from the prefill servers named at its start; {why}", where)
    return transfer


def hand_over(app: web.Application, transfer_id: str, handed: HandedKV | None) -> dict[str, object]:
    """Keep a prefill leg's KV for its decode server; the ``kv_transfer_params`` its answer carries."""
    cfg = app[PD_KEY]
    if handed is None:
        raise ApiError(500, "the prefill step left no KV to hand over (the request ended before it)")
    app[STORE_KEY].put(transfer_id, encode(handed, Origin(cfg.engine_id, cfg.seed, cfg.batch_invariant)))
    return prefill_answer_params(cfg.engine_id, transfer_id, cfg.host, cfg.port, len(handed.prompt_ids))


async def side_channel(request: web.Request) -> web.Response:
    """``GET /kv/{transfer_id}[?engine_id=...]``: a handed-over KV, once; 404 with the reason otherwise."""
    cfg, transfer_id = request.app[PD_KEY], request.match_info["transfer_id"]
    asked = request.query.get("engine_id")
    if asked is not None and asked != cfg.engine_id:
        return _error(ApiError(404, f"transfer {transfer_id!r} asked of engine {asked}; this is {cfg.engine_id}"))
    got = request.app[STORE_KEY].take(transfer_id)
    if isinstance(got, str):
        return _error(ApiError(404, f"transfer {transfer_id!r} on engine {cfg.engine_id}: {got}"))
    return web.Response(body=got, content_type="application/octet-stream")


def _error(err: ApiError) -> web.Response:
    return web.Response(body=orjson.dumps(err.body()), status=err.status, content_type="application/json")


async def _read_bounded(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    if resp.content_length is not None and resp.content_length > limit:
        raise KVWireError(f"{resp.content_length} bytes announced; a KV of this model is at most {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            raise KVWireError(f"more than {limit} bytes; a KV of this model is at most {limit}")
        chunks.append(chunk)
    return b"".join(chunks)


def _gone(text: str) -> str:
    """A known reason of this engine's side channel found in a peer's error body; never the body itself."""
    return next((f" ({reason})" for reason in _GONE if reason in text), "")


async def fetch(app: web.Application, remote: RemotePrefill, prompt_ids: list[int], model: ModelShape) -> HandedKV:
    """The decode leg's KV from its prefill server (one ``--kv-peers`` names: ``transfer_of`` checked), checked:
    this model's shape, this prompt, these weights, finite values."""
    cfg = app[PD_KEY]
    peer = f"http://{cfg.peer(remote.host, remote.port)}"
    name = f"prefill server {peer} (engine {remote.engine_id}, transfer {remote.request_id})"
    url = f"{peer}/kv/{quote(remote.request_id, safe='')}"
    limit = MAX_HEADER_BYTES + 64 + 4 * model.layers * model.heads * model.max_len * model.head_dim
    timeout = aiohttp.ClientTimeout(total=cfg.fetch_timeout_s)
    try:
        params = {"engine_id": remote.engine_id}
        async with app[CLIENT_KEY].get(url, params=params, timeout=timeout, allow_redirects=False) as resp:
            if resp.status != 200:
                text = (await resp.content.read(_SNIPPET)).decode(errors="replace")
                raise ApiError(502, f"KV fetch failed: {name} answered HTTP {resp.status}{_gone(text)}")
            data = await _read_bounded(resp, limit)
    except TimeoutError:
        raise ApiError(504, f"KV fetch timed out: no KV from {name} within {cfg.fetch_timeout_s:g} s") from None
    except aiohttp.ClientConnectorError as exc:
        why = exc.os_error.strerror or type(exc.os_error).__name__
        raise ApiError(502, f"KV fetch failed: {name}: cannot connect ({why})") from None
    except aiohttp.ClientError as exc:  # its message may quote the peer (a reason phrase): the kind only
        raise ApiError(502, f"KV fetch failed: {name}: {type(exc).__name__}") from None
    except KVWireError as exc:
        raise ApiError(502, f"KV fetch failed: {name} sent an unusable KV: {exc}") from None
    try:
        handed, origin = decode(data, model)
    except KVWireError as exc:  # its message names the part and what was expected, never what was sent
        raise ApiError(502, f"KV fetch failed: {name} sent an unusable KV: {exc}") from None
    if handed.prompt_ids != tuple(prompt_ids):
        got, want = len(handed.prompt_ids), len(prompt_ids)
        raise ApiError(502, f"KV from {name} is of another prompt ({got} tokens; this request has {want})")
    if origin.seed != cfg.seed:
        raise ApiError(502, f"KV from {name} was made by other weights (another --seed; this one has {cfg.seed})")
    return handed
