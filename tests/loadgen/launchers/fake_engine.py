"""A stand-in for an engine binary (``vllm``, ``llama-server``...): a real HTTP server on ``--port N``.

``GET /health`` answers 503 for ``FAKE_LOADING_S`` seconds after start (as llama-server does while it
loads a model), then 200. ``FAKE_RECORD=path``: write this process's argv and ``VLLM_*``/``FAKE_*``
environment there as JSON. ``FAKE_CHILD=1``: spawn a child process (a worker) and record its pid, so
tests can check that stopping the engine stops its workers too. Prints what it does, unbuffered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

START = time.monotonic()
LOADING_S = float(os.environ.get("FAKE_LOADING_S", "0"))


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path != "/health":
            self.send_error(404)
            return
        loading = time.monotonic() - START < LOADING_S
        body = b'{"error": {"code": 503, "message": "Loading model"}}' if loading else b'{"status": "ok"}'
        self.send_response(503 if loading else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        print("fake engine:", format % args, flush=True)


def main() -> None:
    argv = sys.argv[1:]
    port = int(argv[argv.index("--port") + 1])
    record: dict[str, object] = {
        "argv": argv,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("VLLM_", "FAKE_"))},
    }
    if os.environ.get("FAKE_CHILD") == "1":
        record["child_pid"] = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]).pid
    if "FAKE_RECORD" in os.environ:
        with open(os.environ["FAKE_RECORD"], "w") as fh:
            json.dump(record, fh)
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"fake engine: loading for {LOADING_S:g} s, listening on {port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
