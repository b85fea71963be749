"""Capture what vllm-router sends to and expects of a prefill and a decode server, as fixtures.

Run: ``python -m tests.loadgen.engine.capture_pd [--out DIR]`` (default: ``fixtures/vllm-router-0.1.17`` next to
this file). It starts two ``pd_recorder.py`` servers (prefill, decode), the real router in PD mode in front of
them (``pd_processes.start_router``; default policy, so cache-aware; health checks every second), sends the
requests below through the router, and writes one JSON file per case: the client's request, every call the
router made to either server while it was answered (in arrival order, ports replaced by ``PREFILL_PORT`` /
``DECODE_PORT``), and what the client got back. ``startup.json`` holds the calls of the
router's start and of two seconds idle. A second router run with the render routes answering 404 gives
``no_render_completions.json``. Bodies are built by ``loadgen.core.wire.request.build_body``, as the load tool
sends them.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from loadgen.core.wire.request import build_body
from loadgen.core.wire.types import Features
from tests.loadgen.engine.pd_processes import ROUTER_VERSION, router_command, start_router
from tests.loadgen.serve_app import script_server

HERE = Path(__file__).parent
RECORDER = HERE / "pd_recorder.py"
FEATURES = Features(logprobs=True, top_logprobs=2, return_token_ids=True, include_usage=True, batch_sizes=True)
PROMPT = "The old man climbed the green hill near the old town before the long night, so"


def _body(kind: str, stream: bool, text: str = PROMPT) -> dict[str, Any]:
    chat = kind == "chat"
    return build_body(
        "chat" if chat else "completions",
        model="recorded-model",
        prompt=None if chat else text,
        messages=[{"role": "user", "content": text}] if chat else None,
        max_tokens=3,
        seed=0,
        stream=stream,
        features=FEATURES,
    )


CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "completions": ("/v1/completions", _body("completions", False)),
    "completions_stream": ("/v1/completions", _body("completions", True)),
    "chat": ("/v1/chat/completions", _body("chat", False)),
    "chat_stream": ("/v1/chat/completions", _body("chat", True)),
    "prefill_fails": ("/v1/completions", _body("completions", False, "prefill-status:500 answers the prefiller")),
    "decode_fails": ("/v1/completions", _body("completions", False, "decode-status:502 answers the decoder")),
    "decode_fails_stream": ("/v1/completions", _body("completions", True, "decode-status:502 answers the decoder")),
}


def _send(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, ctype, raw = resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as err:
        status, ctype, raw = err.code, err.headers.get("Content-Type", ""), err.read()
    text = raw.decode(errors="replace")
    if "json" in ctype:
        return {"status": status, "content_type": ctype, "body": json.loads(text)}
    return {"status": status, "content_type": ctype, "text": text}


class Logs:
    """Both recorders' logs, read as one time-ordered list; ``since`` marks where a case starts."""

    def __init__(self, prefill: Path, decode: Path, ports: dict[str, str]) -> None:
        self.files = (prefill, decode)
        self.ports = ports

    def entries(self) -> list[dict[str, Any]]:
        out = [json.loads(line) for f in self.files if f.exists() for line in f.read_text().splitlines()]
        return sorted(out, key=lambda e: e["t"])

    def normalised(self, value: Any) -> Any:
        """``value`` with the servers' ports named, and without the recorders' timestamps."""
        if isinstance(value, list):
            value = [{k: v for k, v in e.items() if k != "t"} for e in value]
        text = json.dumps(value)
        named = self.ports
        text = re.sub(r"127\.0\.0\.1:(\d+)", lambda m: "127.0.0.1:" + named.get(m[1], m[1]), text)
        text = re.sub(r'"remote_port": (\d+)', lambda m: f'"remote_port": "{named.get(m[1], m[1])}"', text)
        return json.loads(text)


def _capture(out: Path, work: Path, render: bool) -> None:
    plog, dlog = work / f"prefill-{render}.jsonl", work / f"decode-{render}.jsonl"
    flags = () if render else ("--no-render",)
    with (
        script_server(RECORDER, "--role", "prefill", "--log", str(plog), *flags) as p_url,
        script_server(RECORDER, "--role", "decode", "--log", str(dlog), *flags) as d_url,
    ):
        p_port, d_port = p_url.rsplit(":", 1)[1], d_url.rsplit(":", 1)[1]
        logs = Logs(plog, dlog, {p_port: "PREFILL_PORT", d_port: "DECODE_PORT"})
        router_log = work / f"router-{render}.log"
        flags_r = ("--health-check-interval-secs", "1")
        with start_router([p_url], [d_url], router_log, *flags_r) as r_url:
            if render:
                time.sleep(2.0)
                command = router_command([p_url], [d_url], 0, *flags_r)[1:]
                startup = {"router": f"vllm-router {ROUTER_VERSION}", "command": command, "calls": logs.entries()}
                startup["calls"] = logs.normalised(startup["calls"])
                (out / "startup.json").write_text(json.dumps(startup, indent=1) + "\n")
            cases = CASES if render else {"no_render_completions": CASES["completions"]}
            for name, (path, body) in cases.items():
                seen = len(logs.entries())
                answer = _send(r_url + path, body)
                time.sleep(0.3)
                calls = [e for e in logs.entries()[seen:] if e["path"] != "/health"]
                case = {"client_request": {"path": path, "body": body}, "router_calls": logs.normalised(calls)}
                case["client_response"] = logs.normalised(answer)
                (out / f"{name}.json").write_text(json.dumps(case, indent=1) + "\n")
                print(f"{name}: {answer['status']}, {len(calls)} router calls", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "fixtures" / f"vllm-router-{ROUTER_VERSION}")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        _capture(args.out, Path(tmp), render=True)
        _capture(args.out, Path(tmp), render=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
