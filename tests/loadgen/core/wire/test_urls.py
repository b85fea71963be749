"""``Routes.of``: an endpoint's URLs derived once from its base URL, whatever prefix it has and whether it ends in
``/v1`` or not."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.wire.urls import Routes


@pytest.mark.parametrize("base_url", ["http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/"])
def test_routes_of_a_bare_server(base_url: str) -> None:
    routes = Routes.of(base_url)
    assert routes.models == "http://h:8000/v1/models"
    assert routes.root == "http://h:8000"
    assert dict(routes.kinds) == {
        "completions": "http://h:8000/v1/completions",
        "chat": "http://h:8000/v1/chat/completions",
        "generate": "http://h:8000/generate",  # SGLang's native route sits beside /v1
    }


def test_routes_keep_a_path_prefix() -> None:
    routes = Routes.of("https://gw.example/team/llm/v1")
    assert routes.models == "https://gw.example/team/llm/v1/models"
    assert routes.root == "https://gw.example/team/llm"
    assert routes.kinds["generate"] == "https://gw.example/team/llm/generate"


@given(st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,7}", fullmatch=True), max_size=3))
def test_a_base_url_with_or_without_v1_has_the_same_routes(segments: list[str]) -> None:
    prefix = "".join(f"/{s}" for s in segments if s != "v1")
    bare, with_v1 = Routes.of(f"http://h:9{prefix}"), Routes.of(f"http://h:9{prefix}/v1")
    assert bare == with_v1
    assert bare.root == f"http://h:9{prefix}"
    assert all(url.startswith(bare.root + "/") for url in [bare.models, *bare.kinds.values()])
