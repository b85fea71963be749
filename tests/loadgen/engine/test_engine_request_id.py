"""``X-Request-Id`` as the engine's request id, as vLLM takes it: in the answer's id and in the step trace."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.core.steptrace import FILE_GLOB, record_key
from loadgen.engine.protocol import header_request_id

KEY = "0123456789abcdef0123456789abcdef"


def _post(url: str, body: dict[str, Any], request_id: str | None) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", **({"X-Request-Id": request_id} if request_id else {})}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=60) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
    return answer


@pytest.mark.parametrize(
    ("header", "taken"),
    [
        (KEY, KEY),
        ("a b~!", "a b~!"),
        ("x" * 128, "x" * 128),
        ("x" * 129, None),
        ("é", None),
        ("a\tb", None),
        ("", None),
    ],
)
def test_the_header_is_taken_only_when_printable_ascii_and_short(header: str, taken: str | None) -> None:
    assert header_request_id(header) == taken


def test_the_header_names_the_answer_and_the_traced_steps_and_duplicates_stay_apart(
    engine_process: Any, tmp_path: Path
) -> None:
    with engine_process("--step-trace", str(tmp_path)) as (url, _proc):
        body = {"prompt": "the old man saw the river", "max_tokens": 4, "temperature": 0, "ignore_eos": True}
        answers: list[dict[str, Any]] = []
        both = [
            threading.Thread(target=lambda: answers.append(_post(url + "/v1/completions", body, KEY))) for _ in range(2)
        ]
        for t in both:
            t.start()
        for t in both:
            t.join()
        chat = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}
        chat_answer = _post(url + "/v1/chat/completions", chat, "chat-" + KEY)
        bad = _post(url + "/v1/completions", body, "x" * 129)
    assert [a["id"] for a in answers] == [f"cmpl-{KEY}"] * 2
    assert chat_answer["id"] == f"chatcmpl-chat-{KEY}"
    assert bad["id"].startswith("cmpl-") and "x" * 129 not in bad["id"]
    (trace,) = tmp_path.glob(FILE_GLOB)
    records = [orjson.loads(line) for line in trace.read_bytes().splitlines()]
    ids = {i for r in records for i in r["ids"]}
    keyed = {i for i in ids if i.startswith(f"cmpl-{KEY}-")}
    assert len(keyed) == 2  # the same header twice in flight: two engine ids
    assert {record_key(i) for i in keyed} == {KEY}
    assert any(i.startswith(f"chatcmpl-chat-{KEY}-") for i in ids)
