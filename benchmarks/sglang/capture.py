"""Capture what a served SGLang answers, for the tests' fixtures: run on the GPU machine by sglang_h200.sh.

Why: the ``generate`` dialect (loadgen/core/wire/generate.py) and the cache checks must be tested on the bytes the
real server sends. Writes into OUTDIR: /generate whole and streamed (with logprobs and two alternatives),
/generate and /v1/completions with three prompts in one request (a burst sent with
``sweep.burst_send = "one-request"``), /v1/completions (token strings, no ids), /metrics idle and busy,
/get_server_info, /v1/models, and the /flush_cache answer idle and while requests run. Stdlib only (it runs
beside the server, nothing installed).

usage: python3 capture.py BASE_URL OUTDIR
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

PROMPT = "The old man climbed the green hill near the old town before the long night, so"


def call(url: str, body: dict[str, object] | None = None, method: str = "GET") -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def generate_body(stream: bool, max_new_tokens: int = 8) -> dict[str, object]:
    return {
        "text": PROMPT,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "top_p": 1, "top_k": -1, "n": 1},
        "stream": stream,
        "return_logprob": True,
        "logprob_start_len": -1,
        "top_logprobs_num": 2,
        "return_text_in_logprobs": True,
    }


def main() -> None:
    base, out = sys.argv[1].rstrip("/"), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for name, path in (("models.json", "/v1/models"), ("server-info.json", "/get_server_info")):
        (out / name).write_bytes(call(base + path)[1])
    (out / "generate.json").write_bytes(call(base + "/generate", generate_body(False), "POST")[1])
    (out / "generate-stream.txt").write_bytes(call(base + "/generate", generate_body(True), "POST")[1])
    completions = {"model": "tiny-qwen3", "prompt": PROMPT, "max_tokens": 8, "temperature": 0, "logprobs": 2}
    (out / "completions.json").write_bytes(call(base + "/v1/completions", completions, "POST")[1])
    several = [PROMPT, PROMPT[:40], PROMPT]
    batch = {**generate_body(False), "text": several}
    (out / "generate-batch.json").write_bytes(call(base + "/generate", batch, "POST")[1])
    completions_batch = {**completions, "prompt": several}
    (out / "completions-batch.json").write_bytes(call(base + "/v1/completions", completions_batch, "POST")[1])
    (out / "metrics-idle.txt").write_bytes(call(base + "/metrics")[1])
    status, body = call(base + "/flush_cache", None, "POST")
    (out / "flush-idle.txt").write_text(f"{status}\n{body.decode(errors='replace')}")
    busy = [
        threading.Thread(target=call, args=(base + "/generate", generate_body(False, 512), "POST")) for _ in range(8)
    ]
    for t in busy:
        t.start()
    time.sleep(1.0)
    (out / "metrics-busy.txt").write_bytes(call(base + "/metrics")[1])
    status, body = call(base + "/flush_cache", None, "POST")
    (out / "flush-busy.txt").write_text(f"{status}\n{body.decode(errors='replace')}")
    for t in busy:
        t.join()
    print("captured", sorted(p.name for p in out.iterdir()))


if __name__ == "__main__":
    main()
