"""The [launcher], [cold_boot] and [matrix] sections: mistakes fail at load time, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.core.errors import ScenarioError
from loadgen.core.scenario import parse_scenario

CANARY = [{"id": "c", "prompt": "hello"}]


def _load(**sections: Any) -> Any:
    return parse_scenario({"canaries": CANARY, **sections}, "s.toml")


def test_a_full_study_scenario_loads() -> None:
    s = _load(
        launcher={"kind": "vllm", "model": "Qwen/Qwen3-8B", "env": {"VLLM_BATCH_INVARIANT": "0"}},
        cold_boot={"boots": 3, "requests": 4},
        matrix={"cells": [{"name": "apc-on"}, {"name": "apc-off", "args": ["--no-enable-prefix-caching"]}]},
    )
    assert s.launcher.kind == "vllm" and s.cold_boot.boots == 3 and s.matrix.cells[1].args[0].startswith("--no")
    assert _load().launcher is None  # optional: a plain scenario is unchanged


@pytest.mark.parametrize(
    ("sections", "field", "words"),
    [
        ({"launcher": {"kind": "vllm"}}, "launcher", "needs 'model'"),
        ({"launcher": {"kind": "sglang", "model": "m", "comand": "x"}}, "launcher.comand", "unknown field"),
        ({"launcher": {"kind": "command", "command": "serve"}}, "launcher", "{port}"),
        ({"launcher": {"kind": "embedded", "model": "m"}}, "launcher", "takes no 'model'"),
        ({"launcher": {"kind": "tgi"}}, "launcher.kind", "embedded"),
        ({"launcher": {"env": {"HF_TOKEN": "hf_abc"}}}, "launcher.env", "looks like a secret"),
        (
            {"launcher": {"env": {"HF_HOME": "hf_abcdefghijklmnopqrstuvwxyz12"}}},
            "launcher.env",
            "HF_HOME looks like a key",
        ),
        (
            {"launcher": {"kind": "vllm", "model": "m", "args": ["--api-key", "hf_abc"]}},
            "launcher.args",
            "--api-key's value looks like a key",
        ),
        ({"launcher": {"args": ["--api_key=hf_abc"]}}, "launcher.args", "--api_key's value looks like a key"),
        ({"launcher": {"args": ["--x", "sk-abcdefghijklmnopqrstu"]}}, "launcher.args", "argument 2 looks like a key"),
        (
            {"matrix": {"cells": [{"name": "a", "args": ["--token", "hf_abc"]}, {"name": "b"}]}},
            "matrix.cells[0].args",
            "looks like a key",
        ),
        ({"cold_boot": {"requests": 1}}, "cold_boot.requests", "greater than or equal to 2"),
        ({"matrix": {"cells": [{"name": "only"}]}}, "matrix.cells", "at least 2"),
        ({"matrix": {"cells": [{"name": "a"}, {"name": "a"}]}}, "matrix.cells", "distinct"),
        ({"matrix": {"cells": [{"name": "a/b"}, {"name": "c"}]}}, "matrix.cells[0].name", "pattern"),
        ({"matrix": {"cells": [{"name": ".."}, {"name": "c"}]}}, "matrix.cells[0].name", "names no folder"),
        ({"matrix": {"cells": [{"name": "a"}, {"name": "."}]}}, "matrix.cells[1].name", "names no folder"),
        (
            {"matrix": {"cells": [{"name": "a", "base_url": "http://h:1", "args": ["-x"]}, {"name": "b"}]}},
            "matrix.cells[0]",
            "starts no engine",
        ),
    ],
)
def test_mistakes_name_the_field(sections: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ScenarioError) as info:
        _load(**sections)
    msg = str(info.value)
    assert msg.startswith("s.toml: invalid scenario") and f"field {field}:" in msg and words in msg
    assert "hf_abc" not in msg and "sk-abc" not in msg  # values are never echoed
