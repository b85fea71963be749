"""An OpenAI-style completions server that answers the re-score check honestly, or with one hostile answer.

Run as ``python -m tests.loadgen.rescore_server [--answer MODE]``; prints ``READY http://127.0.0.1:PORT``. A
canary (a text prompt) gets ids 1000.. and logprobs -0.25 in vLLM's legacy shape, with ``prompt_token_ids`` (one
id per word of the prompt, 10..) when ``return_token_ids`` is asked. A re-score (the prompt a list of ids,
``prompt_logprobs`` asked) gets vLLM's ``prompt_logprobs``: null first, then per position the given id at -0.25
and one alternative, so an honest answer is bitwise the decode's. ``--answer``:
- ``honest``: as above.
- ``none``: no ``prompt_logprobs`` at all (a server that ignores the field).
- ``short``: one position fewer than the ids sent.
- ``other-ids``: every position scored for another id than the one sent.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from aiohttp import web

from tests.loadgen.common_routes import legacy_choice, legacy_text, models, running_gauge
from tests.loadgen.serve_app import run, serve

ANSWERS = ("honest", "none", "short", "other-ids")
STATE: dict[str, Any] = {"inflight": 0, "answer": "honest"}


def prompt_logprobs(ids: list[int], mode: str) -> list[Any]:
    shift = 1 if mode == "other-ids" else 0
    positions: list[Any] = [None]
    for t in ids[1:]:
        given = t + shift
        positions.append(
            {
                str(given): {"logprob": -0.25, "rank": 1, "decoded_token": legacy_text(given)},
                str(given + 1): {"logprob": -1.5, "rank": 2, "decoded_token": legacy_text(given + 1)},
            }
        )
    return positions[:-1] if mode == "short" else positions


async def answer(request: web.Request) -> web.Response:
    body = await request.json()
    STATE["inflight"] += 1
    try:
        await asyncio.sleep(0.01 * int(body["max_tokens"]))
        prompt = body["prompt"]
        if isinstance(prompt, list):  # a re-score: the ids sent back
            choice: dict[str, Any] = {"index": 0, "text": legacy_text(1000), "finish_reason": "length"}
            if STATE["answer"] != "none" and body.get("prompt_logprobs") is not None:
                choice["prompt_logprobs"] = prompt_logprobs([int(t) for t in prompt], STATE["answer"])
        else:
            choice = legacy_choice(list(range(1000, 1000 + int(body["max_tokens"]))), body, "length")
            if body.get("return_token_ids"):
                choice["prompt_token_ids"] = [10 + i for i, _ in enumerate(str(prompt).split())]
        usage = {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9}
        return web.json_response(
            {"id": "x", "object": "text_completion", "model": "m", "choices": [choice], "usage": usage}
        )
    finally:
        STATE["inflight"] -= 1


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--answer", choices=ANSWERS, default="honest")
    STATE["answer"] = parser.parse_args().answer
    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", running_gauge(STATE))
    app.router.add_post("/v1/completions", answer)
    await serve(app)


if __name__ == "__main__":
    run(main)
