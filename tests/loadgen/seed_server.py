"""An OpenAI-style server that samples by its seed, and can break one seed contract on purpose.

Run as ``python -m tests.loadgen.seed_server [--break MODE] [--token-s S]``; prints ``READY http://127.0.0.1:PORT``.
It is the adversary of the seed contracts (docs/rl.md): an endpoint whose sampling looks fine request by request
and breaks a promise an RL trainer relies on.

The rule: a request seeded ``s`` with prompt ``p`` gets ``max_tokens`` ids drawn from ``random.Random(f"{s}|{p}")``
(1000..1999), so one seed is one completion whatever the load, and different seeds differ; an unseeded request
draws from the server's one shared generator. Choice ``j`` of an ``n``-choice request is seeded ``s + j``, as vLLM
does. The routes ``/v1/completions`` (vLLM's legacy shape, ids in ``token_ids`` when asked), ``/v1/chat/completions``
(the last message's content as the prompt) and SGLang's ``/generate`` (its seed in
``sampling_params.sampling_seed``, ids in ``output_ids``) all follow it. Every answer is unstreamed and takes
``--token-s`` a token, so background requests overlap the canaries.

``--break``:
- ``chat-seed``: the chat route drops the request's seed and draws from the server's fixed seed 0 (every seed
  the same completion there); completions and ``/generate`` honour it.
- ``duplicate-choices``: every choice of an ``n``-choice request is seeded ``s`` (all ``n`` choices the same).
- ``generate-route``: ``/generate`` throws one draw away before the first token, so one seed gives other tokens
  there than on ``/v1/completions``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from typing import Any

from aiohttp import web

from tests.loadgen.common_routes import legacy_choice, legacy_text, models, running_gauge
from tests.loadgen.serve_app import run, serve

BREAKS = ("none", "chat-seed", "duplicate-choices", "generate-route")
STATE: dict[str, Any] = {"inflight": 0, "break": "none", "token_s": 0.01, "shared": random.Random()}


def sample(seed: int | None, prompt: str, max_tokens: int, *, skip: int = 0) -> list[int]:
    """The ids a request seeded ``seed`` gets for ``prompt`` (the shared generator's when unseeded)."""
    rng = STATE["shared"] if seed is None else random.Random(f"{seed}|{prompt}")
    for _ in range(skip):
        rng.random()
    return [1000 + rng.randrange(1000) for _ in range(max_tokens)]


def choice_seed(seed: int | None, j: int) -> int | None:
    if seed is None or STATE["break"] == "duplicate-choices":
        return seed
    return seed + j


async def answer(request: web.Request) -> web.Response:
    body = await request.json()
    STATE["inflight"] += 1
    try:
        if request.path == "/generate":
            params = body["sampling_params"]
            skip = 1 if STATE["break"] == "generate-route" else 0
            ids = sample(params.get("sampling_seed"), str(body["text"]), int(params["max_new_tokens"]), skip=skip)
            await asyncio.sleep(STATE["token_s"] * len(ids))
            meta = {"id": "r", "finish_reason": {"type": "length", "length": len(ids)}, "prompt_tokens": 8}
            meta["completion_tokens"] = len(ids)
            return web.json_response({"text": "".join(map(legacy_text, ids)), "output_ids": ids, "meta_info": meta})
        chat = request.path.endswith("/chat/completions")
        prompt = str(body["messages"][-1]["content"]) if chat else str(body["prompt"])
        seed = 0 if chat and STATE["break"] == "chat-seed" else body.get("seed")
        n, max_tokens = int(body.get("n") or 1), int(body["max_tokens"])
        drawn = [sample(choice_seed(seed, j), prompt, max_tokens) for j in range(n)]
        await asyncio.sleep(STATE["token_s"] * max_tokens)
        choices = []
        for j, ids in enumerate(drawn):
            choice = legacy_choice(ids, body, "length") | {"index": j}
            if chat:
                choice["message"] = {"role": "assistant", "content": choice.pop("text")}
                choice.pop("logprobs", None)
            choices.append(choice)
        usage = {"prompt_tokens": 8, "completion_tokens": n * max_tokens, "total_tokens": 8 + n * max_tokens}
        obj = "chat.completion" if chat else "text_completion"
        return web.json_response({"id": "x", "object": obj, "model": "m", "choices": choices, "usage": usage})
    finally:
        STATE["inflight"] -= 1


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--break", dest="mode", choices=BREAKS, default="none")
    parser.add_argument("--token-s", type=float, default=0.01)
    args = parser.parse_args()
    STATE["break"], STATE["token_s"] = args.mode, args.token_s
    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", running_gauge(STATE))
    for path in ("/v1/completions", "/v1/chat/completions", "/generate"):
        app.router.add_post(path, answer)
    await serve(app)


if __name__ == "__main__":
    run(main)
