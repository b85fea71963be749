"""``kv_offload`` on [launcher], a [matrix] cell and a topology side, and ``cache = "offload"``: what each kind of
engine can be given is decided when the scenario loads, the message naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.errors import ScenarioError
from loadgen.core.scenario import parse_scenario
from loadgen.core.scenario.engines import KvOffload, Side, kv_offload_problem

CANARY = [{"id": "c", "prompt": "hello"}]
VLLM = {"kind": "vllm", "model": "m"}


def _load(**sections: Any) -> Any:
    return parse_scenario({"canaries": CANARY, **sections}, "s.toml")


def test_the_setting_loads_on_each_place_it_may_stand() -> None:
    s = _load(
        launcher={**VLLM, "kv_offload": {"size_gib": 4, "backend": "lmcache"}},
        topology={"mode": "pd", "decode": {"kv_offload": {"size_gib": 8}}},
        matrix={"cells": [{"name": "off"}, {"name": "on", "kv_offload": {"size_gib": 2.5}}]},
    )
    assert s.launcher.kv_offload == KvOffload(size_gib=4, backend="lmcache")
    assert s.topology.decode.kv_offload == KvOffload(size_gib=8)
    assert s.matrix.cells[1].kv_offload.size_gib == 2.5 and s.matrix.cells[0].kv_offload is None
    embedded = _load(launcher={"kv_offload": {"size_gib": 1, "dtype": "fp8"}})
    assert embedded.launcher.kv_offload == KvOffload(size_gib=1, backend="native", dtype="fp8")
    assert _load(canaries=[{"id": "c", "prompt": "hello", "cache": "offload"}]).canaries[0].cache == "offload"


@pytest.mark.parametrize(
    ("sections", "words"),
    [
        ({"launcher": {"kv_offload": {"size_gib": 0}}}, "field launcher.kv_offload.size_gib: Input should be greater"),
        ({"launcher": {"kv_offload": {"size_gib": 1, "backend": "disk"}}}, "launcher.kv_offload.backend"),
        ({"launcher": {"kv_offload": {"size_gib": 1, "dtype": "int4"}}}, "launcher.kv_offload.dtype"),
        ({"launcher": {"kv_offload": {"backend": "native"}}}, "launcher.kv_offload.size_gib: Field required"),
        (
            {"launcher": {"kv_offload": {"size_gib": 1, "backend": "lmcache"}}},
            "kv_offload.backend: the embedded engine's tier is 'native' only, not 'lmcache'",
        ),
        ({"launcher": {**VLLM, "kv_offload": {"size_gib": 1, "dtype": "fp8"}}}, "kv_offload.dtype: vLLM's tier"),
        ({"launcher": {"kind": "sglang", "model": "m", "kv_offload": {"size_gib": 1}}}, "kind 'sglang' has no KV"),
        ({"launcher": {"kind": "llamacpp", "model": "m", "kv_offload": {"size_gib": 1}}}, "kind 'llamacpp' has no"),
        (
            {"launcher": {**VLLM, "args": ["--kv-offloading-size=4"], "kv_offload": {"size_gib": 1}}},
            "the args give --kv-offloading-size too",
        ),
        (
            {"matrix": {"cells": [{"name": "a"}, {"name": "b", "kv_offload": {"size_gib": 1, "backend": "lmcache"}}]}},
            "field matrix: cells[1].kv_offload.backend: the embedded engine's tier is 'native' only",
        ),
        (
            {
                "launcher": {**VLLM, "kv_offload": {"size_gib": 1}},
                "matrix": {"cells": [{"name": "a"}, {"name": "b", "args": ["--kv-offloading-backend", "native"]}]},
            },
            "launcher.kv_offload: the args give --kv-offloading-backend too",
        ),
        (
            {
                "matrix": {
                    "cells": [{"name": "a"}, {"name": "b", "base_url": "http://h:1", "kv_offload": {"size_gib": 1}}]
                }
            },
            "drop 'kv_offload'",
        ),
        (
            {"launcher": VLLM, "topology": {"prefill": {"kv_offload": {"size_gib": 1, "dtype": "bf16"}}}},
            "field topology: topology.prefill.kv_offload.dtype: vLLM's tier",
        ),
        (
            {"launcher": {"kind": "sglang", "model": "m"}, "topology": {"decode": {"kv_offload": {"size_gib": 1}}}},
            "topology.decode.kv_offload: kind 'sglang' has no KV offloading flags",
        ),
        (
            {"canaries": [{"id": "c", "prompt": "hi", "cache": "offload"}], "sweep": {"burst": 3}},
            "canary 'c' has cache = \"offload\"",
        ),
    ],
)
def test_what_a_kind_cannot_take_is_refused_naming_the_field(sections: dict[str, Any], words: str) -> None:
    with pytest.raises(ScenarioError) as err:
        _load(**sections)
    assert words in str(err.value)


def test_a_sides_setting_replaces_the_one_below_it() -> None:
    base, own = KvOffload(size_gib=1), KvOffload(size_gib=2, dtype="fp8")
    assert Side(kv_offload=own).over(Side(kv_offload=base)).kv_offload == own
    assert Side(args=["-x"]).over(Side(kv_offload=base)) == Side(args=["-x"], kv_offload=base)


@given(
    kind=st.sampled_from(["embedded", "vllm", "sglang", "llamacpp", "command"]),
    backend=st.sampled_from(["native", "lmcache"]),
    dtype=st.sampled_from([None, "bf16", "fp8"]),
)
def test_only_what_the_kinds_engine_has_passes(kind: str, backend: str, dtype: str | None) -> None:
    offload = KvOffload(size_gib=1, backend=backend, dtype=dtype)  # type: ignore[arg-type]
    fits = (kind == "embedded" and backend == "native") or (kind == "vllm" and dtype is None)
    assert (kv_offload_problem(kind, offload, [], "kv_offload") is None) == fits
    assert kv_offload_problem(kind, None, ["--kv-offloading-size", "1"], "kv_offload") is None
