"""The re-score request and its answer (``loadgen.core.wire.rescore``): vLLM's ``prompt_logprobs`` and SGLang's
``input_token_logprobs`` read into the output positions' logprobs, and each hostile answer a typed fault."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.wire.rescore import Rescored, RescoreFault, parse_rescore, rescore_body

PROMPT, OUTPUT = [5, 6, 7], [8, 9]


def vllm_answer(ids: list[int], lps: list[float], *, k: int = 1) -> dict[str, Any]:
    """vLLM's shape: the first position null, then the given token and k alternatives per position."""
    positions: list[Any] = [None]
    for i in range(1, len(ids)):
        pos = {str(ids[i]): {"logprob": lps[i], "rank": 2, "decoded_token": f"w{ids[i]}"}}
        for j in range(k):
            pos[str(1000 + j)] = {"logprob": lps[i] + 0.5 / (j + 1), "rank": j + 1, "decoded_token": f"a{j}"}
        positions.append(pos)
    return {"choices": [{"index": 0, "text": "x", "prompt_logprobs": positions}]}


def parse(answer: Any, kind: Any = "completions") -> Rescored | RescoreFault:
    return parse_rescore(kind, orjson.dumps(answer), prompt_ids=PROMPT, output_ids=OUTPUT)


def test_bodies_follow_each_dialect() -> None:
    body = rescore_body("completions", model="m", prompt_ids=PROMPT, output_ids=OUTPUT, top_k=50)
    assert body == {
        "model": "m",
        "prompt": [5, 6, 7, 8, 9],
        "max_tokens": 1,
        "temperature": 0,
        "prompt_logprobs": 20,  # vLLM's bound
        "stream": False,
    }
    gen = rescore_body("generate", model="m", prompt_ids=PROMPT, output_ids=OUTPUT, top_k=3)
    assert gen["input_ids"] == [5, 6, 7, 8, 9] and gen["logprob_start_len"] == 0 and gen["top_logprobs_num"] == 3
    assert gen["return_logprob"] is True and "model" not in gen
    with pytest.raises(ValueError, match="chat"):
        rescore_body("chat", model="m", prompt_ids=PROMPT, output_ids=OUTPUT, top_k=1)


@given(st.lists(st.floats(-30, 0), min_size=5, max_size=5), st.integers(0, 3))
def test_vllm_output_positions_are_read_in_order(lps: list[float], k: int) -> None:
    got = parse(vllm_answer([*PROMPT, *OUTPUT], lps, k=k))
    assert isinstance(got, Rescored)
    assert got.logprobs == lps[3:]
    if k:
        assert got.top_logprobs is not None and [len(p) for p in got.top_logprobs] == [k + 1, k + 1]
        assert got.top_logprobs[0][0] == ("a0", lps[3] + 0.5)  # rank 1 first
    else:
        assert got.top_logprobs is None


def test_sglang_input_token_logprobs() -> None:
    ids = [*PROMPT, *OUTPUT]
    given_ = [[None, ids[0], "t"], *[[-0.1 * i, t, f"w{t}"] for i, t in enumerate(ids[1:], start=1)]]
    tops = [None, *[[[-0.05, 77, "top"], [-0.1 * i, t, f"w{t}"]] for i, t in enumerate(ids[1:], start=1)]]
    got = parse({"text": "", "meta_info": {"input_token_logprobs": given_, "input_top_logprobs": tops}}, "generate")
    assert isinstance(got, Rescored)
    assert got.logprobs == [-0.30000000000000004, -0.4]
    assert got.top_logprobs is not None and got.top_logprobs[0] == [("top", -0.05), ("w8", -0.30000000000000004)]


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        ({"choices": [{"index": 0, "text": "x"}]}, "no_prompt_logprobs"),
        ({"choices": [{"index": 0, "text": "x", "prompt_logprobs": None}]}, "no_prompt_logprobs"),
        (vllm_answer([5, 6, 7, 8], [0, -1, -1, -1]), "fewer_positions"),
        (vllm_answer([5, 6, 7, 8, 4], [0, -1, -1, -1, -1]), "other_ids"),
        ({"choices": [{"prompt_logprobs": [None, {"6": {"logprob": "x"}}]}]}, "malformed"),
        ([], "malformed"),
        ({"meta_info": {}}, "malformed"),
    ],
)
def test_hostile_answers_are_faults_never_zeros(answer: Any, kind: str) -> None:
    got = parse(answer)
    assert isinstance(got, RescoreFault) and got.kind == kind and got.message


def test_sglang_without_input_logprobs_is_a_fault() -> None:
    got = parse({"text": "", "meta_info": {"output_token_logprobs": []}}, "generate")
    assert isinstance(got, RescoreFault) and got.kind == "no_prompt_logprobs"


def test_not_json_is_malformed() -> None:
    got = parse_rescore("completions", b"<html>", prompt_ids=PROMPT, output_ids=OUTPUT)
    assert isinstance(got, RescoreFault) and got.kind == "malformed"
