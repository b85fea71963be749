"""An engine whose worker thread died says so (loadgen/engine/runner.py, ``/health`` in loadgen/engine/server.py).

The real ``loadgen serve`` as a process, with one change made before it starts: ``Scheduler.step`` raises once a
request whose id holds ``die-`` is in the scheduler (an ``X-Request-Id`` header gives that id). That stands for
any bug a step can hit (a poisoned KV once made sampling raise there). The request that killed the thread, one
in flight beside it (streamed) and every later one are answered, never left waiting; ``/health`` answers 503
with the reason, so a launcher or a load balancer stops sending.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from loadgen.engine.runner import EngineDead, RequestStream
from loadgen.engine.scheduler import Delivery, TokenEvent

KILLER = """
import sys
from loadgen.engine import scheduler
step = scheduler.Scheduler.step
def dying_step(self):
    ids = [r.request_id for r in self.waiting] + list(self.running)
    if any("die-" in i for i in ids):
        raise RuntimeError("a step hit a bug")
    return step(self)
scheduler.Scheduler.step = dying_step
from loadgen.engine.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture
def engine() -> Iterator[str]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", KILLER, "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("READY "), line
        yield line.split()[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err[-2000:]


def request(url: str, body: dict[str, object] | None = None, rid: str | None = None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"} | ({"X-Request-Id": rid} if rid else {})
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=20) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def completion(tokens: int, stream: bool = False) -> dict[str, object]:
    return {"model": "loadgen-tiny", "prompt": "the old man", "max_tokens": tokens, "ignore_eos": True} | {
        "temperature": 0,
        "stream": stream,
    }


def test_a_dead_engine_thread_answers_every_request_and_fails_health(engine: str) -> None:
    assert request(engine + "/health")[0] == 200
    assert request(engine + "/v1/completions", completion(4))[0] == 200
    # streamed, 400 tokens, its first chunk read: in flight when the thread dies
    req = urllib.request.Request(engine + "/v1/completions", json.dumps(completion(400, True)).encode())
    with urllib.request.urlopen(req, timeout=20) as long:
        assert long.status == 200 and long.readline().startswith(b"data: ")
        status, raw = request(engine + "/v1/completions", completion(4), rid="die-now")
        assert status == 503, raw[:300]
        assert "the engine thread died: RuntimeError: a step hit a bug" in json.loads(raw)["error"]["message"]
        rest = long.read()  # ends: the error rides in the stream, and no [DONE]
    assert b'"error"' in rest and b"the engine thread died" in rest and b"[DONE]" not in rest

    status, raw = request(engine + "/health")
    assert status == 503 and "the engine thread died" in json.loads(raw)["error"]["message"]
    for path, body in (("/v1/completions", completion(2)), ("/v1/chat/completions", None)):
        chat = {"model": "loadgen-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        status, raw = request(engine + path, body or chat)
        assert status == 503 and b"the engine thread died" in raw
    assert request(engine + "/reset_prefix_cache", {})[0] == 503


def test_tokens_then_death_hands_the_tokens_and_then_the_death_never_a_wait() -> None:
    """The class of the race the test above can lose: the thread's last step delivered tokens, then it died,
    both before the handler looked. The handler takes the tokens, and its next look raises at once."""

    async def scenario() -> None:
        for delivered in (0, 1, 3):
            stream = RequestStream("r", [1, 2])
            for n in range(delivered):
                stream._deliver(Delivery("r", 0, [TokenEvent(n, -0.1, (), "x")], 1))
            stream._fail("the engine thread died: RuntimeError: boom")
            if delivered:
                events = await asyncio.wait_for(stream.next_events(), timeout=5)
                assert [e.token_id for e in events] == list(range(delivered))
            with pytest.raises(EngineDead, match="boom"):
                await asyncio.wait_for(stream.next_events(), timeout=5)

    asyncio.run(scenario())
