"""``kv_transfer_params``: the fields a prefill/decode pair and vllm-router pass along, in vLLM's NixlConnector names.

Why this module exists: the embedded engine's prefill and decode roles must speak the protocol the real
router and vLLM speak (captured in tests/loadgen/engine/fixtures/vllm-router-0.1.17/). The router sends the
prefill leg ``{"do_remote_decode": true, ...}``; the prefill server answers, like vLLM's
``NixlConnectorScheduler.request_finished``, ``do_remote_prefill`` true, ``do_remote_decode`` false,
``remote_block_ids``, ``remote_engine_id``, ``remote_request_id``, ``remote_host``, ``remote_port`` and
``tp_size``; the router copies that object into the decode leg, whose server fetches the KV from
``remote_host:remote_port`` by ``remote_request_id``. Here the body field is read into a typed
:class:`KVTransfer` (a client mistake is a 400 naming the field) and the prefill answer's object is built.
Pure: dicts in, dataclasses out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.engine.kvcache import BLOCK_TOKENS
from loadgen.engine.protocol import ApiError

FIELD = "kv_transfer_params"


@dataclass(frozen=True)
class RemotePrefill:
    """Where a decode leg's KV waits: the prefill server's side channel and the transfer's id there."""

    host: str
    port: int
    engine_id: str
    request_id: str
    block_ids: tuple[int, ...]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class KVTransfer:
    """A request's part in a prefill/decode handoff: hand its KV over (prefill leg) or fetch it (decode leg)."""

    hand_over: bool = False
    fetch_from: RemotePrefill | None = None


def _field(params: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = params.get(key)
    if value is None or isinstance(value, bool) or not isinstance(value, kind):
        raise ApiError(400, f"'{FIELD}.{key}' is required with do_remote_prefill; got {value!r}", f"{FIELD}.{key}")
    return value


def parse_kv_transfer(value: object) -> KVTransfer | None:
    """The body's ``kv_transfer_params``; None when absent or when it asks for neither leg."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ApiError(400, f"'{FIELD}' must be an object; got {value!r}", FIELD)
    decode_leg, prefill_leg = value.get("do_remote_prefill"), value.get("do_remote_decode")
    for key, flag in (("do_remote_prefill", decode_leg), ("do_remote_decode", prefill_leg)):
        if flag is not None and not isinstance(flag, bool):
            raise ApiError(400, f"'{FIELD}.{key}' must be a boolean; got {flag!r}", f"{FIELD}.{key}")
    if decode_leg and prefill_leg:
        raise ApiError(400, f"'{FIELD}' asks for both do_remote_prefill and do_remote_decode", FIELD)
    if prefill_leg:
        return KVTransfer(hand_over=True)
    if not decode_leg:
        return None
    port = _field(value, "remote_port", int)
    if not 0 < port < 65536:
        raise ApiError(400, f"'{FIELD}.remote_port' must be a TCP port; got {port}", f"{FIELD}.remote_port")
    blocks = value.get("remote_block_ids") or []
    if not isinstance(blocks, list) or not all(isinstance(b, int) and not isinstance(b, bool) for b in blocks):
        raise ApiError(400, f"'{FIELD}.remote_block_ids' must be a list of integers", f"{FIELD}.remote_block_ids")
    remote = RemotePrefill(
        host=_field(value, "remote_host", str),
        port=port,
        engine_id=_field(value, "remote_engine_id", str),
        request_id=_field(value, "remote_request_id", str),
        block_ids=tuple(blocks),
    )
    return KVTransfer(fetch_from=remote)


def prefill_answer_params(engine_id: str, request_id: str, host: str, port: int, prompt_len: int) -> dict[str, Any]:
    """The prefill answer's ``kv_transfer_params``: vLLM NixlConnector's fields; the blocks are the 16-token
    blocks the handed-over prompt spans, numbered from 0 (this engine keeps one slot per sequence, not pages)."""
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": list(range(-(-prompt_len // BLOCK_TOKENS))),
        "remote_engine_id": engine_id,
        "remote_request_id": request_id,
        "remote_host": host,
        "remote_port": port,
        "tp_size": 1,
    }
