"""The engine as a process: READY line, clean signals, and the D3 2x2 with a fresh server per boot."""

from __future__ import annotations

import json
import signal
import urllib.request
from typing import Any

import pytest

from loadgen.engine.cli import build_parser, options_from_args, roles_from_args
from loadgen.engine.prompts import D3_LONG_PROMPT, D3_MAX_TOKENS, D3_SHORT_PROMPT


def _ids(url: str, prompt: str) -> tuple[int, ...]:
    body = {"prompt": prompt, "max_tokens": D3_MAX_TOKENS, "temperature": 0, "seed": 0, "return_token_ids": True}
    req = urllib.request.Request(
        url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return tuple(json.loads(r.read())["choices"][0]["token_ids"])


def test_parser_defaults_and_flags() -> None:
    opts = options_from_args(build_parser().parse_args([]))
    assert opts.enable_prefix_caching and not opts.batch_invariant and opts.max_num_seqs == 64
    opts = options_from_args(
        build_parser().parse_args(["--batch-invariant", "--no-enable-prefix-caching", "--max-num-seqs", "8"])
    )
    assert opts.batch_invariant and not opts.enable_prefix_caching and opts.max_num_seqs == 8
    with pytest.raises(SystemExit):
        options_from_args(build_parser().parse_args(["--logit-scale", "0"]))


def test_offload_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's flags: a size in GiB turns the tier on; the backend is native only (lmcache refused in one line)."""
    opts = options_from_args(build_parser().parse_args([]))
    assert (opts.kv_offloading_size, opts.kv_offloading_dtype) == (None, "bf16")
    args = ["--kv-offloading-size", "0.5", "--kv-offloading-backend", "native", "--kv-offloading-dtype", "fp8"]
    opts = options_from_args(build_parser().parse_args(args))
    assert (opts.kv_offloading_size, opts.kv_offloading_dtype) == (0.5, "fp8")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--kv-offloading-backend", "lmcache"])
    assert "native only (lmcache needs a separate LMCache server)" in capsys.readouterr().err
    for bad in (["--kv-offloading-size", "0"], ["--kv-offloading-size", "1", "--backend", "gpu"]):
        with pytest.raises(SystemExit, match="--kv-offloading-size"):
            options_from_args(build_parser().parse_args(bad))


def test_role_flags() -> None:
    args = build_parser().parse_args(["--role", "decode", "--kv-fetch-timeout", "3", "--seed", "5"])
    roles = roles_from_args(args, args.host)
    assert (roles.role, roles.fetch_timeout_s, roles.seed, roles.host) == ("decode", 3.0, 5, "127.0.0.1")
    assert roles_from_args(build_parser().parse_args([]), "0.0.0.0").host == "127.0.0.1"  # a wildcard is no address
    for bad in (["--role", "prefill", "--backend", "gpu"], ["--kv-transfer-ttl", "0"], ["--kv-transfer-max-mib", "-1"]):
        with pytest.raises(SystemExit):
            roles_from_args(build_parser().parse_args(bad), "127.0.0.1")


def test_kv_peers_are_addresses_or_self_and_only_for_a_server_that_decodes() -> None:
    def peers(*argv: str) -> tuple[str, ...]:
        return roles_from_args(build_parser().parse_args(list(argv)), "127.0.0.1").peers

    assert peers() == () and peers("--role", "both") == ()  # by default a server fetches from no one
    got = peers("--role", "decode", "--kv-peers", "127.0.0.1:8100, Prefill.Local:8101", "--kv-peers", "self,,")
    assert got == ("127.0.0.1:8100", "prefill.local:8101", "self")
    for bad in (["--kv-peers", "127.0.0.1"], ["--kv-peers", "host:0"], ["--kv-peers", ":80"], ["--kv-peers", "h:x"]):
        with pytest.raises(SystemExit, match="--kv-peers entry"):
            peers("--role", "decode", *bad)
    for bad in (["--role", "prefill"], ["--backend", "gpu"]):
        with pytest.raises(SystemExit, match="--kv-peers"):
            peers(*bad, "--kv-peers", "127.0.0.1:8100")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_ready_line_then_clean_exit_on_signal(engine_process: Any, sig: signal.Signals) -> None:
    with engine_process() as (url, proc):
        assert urllib.request.urlopen(url + "/health", timeout=10).status == 200
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        assert proc.stdout.read() == ""  # exactly one line on stdout


CELLS = {
    ("on", "off"): [],
    ("off", "off"): ["--no-enable-prefix-caching"],
    ("on", "on"): ["--batch-invariant"],
    ("off", "on"): ["--no-enable-prefix-caching", "--batch-invariant"],
}


def test_d3_first_request_divergence_appears_only_with_prefix_caching_on_and_invariance_off(
    engine_process: Any,
) -> None:
    """Fresh server per boot, six one-at-a-time requests; two boots for the cell that diverges."""
    firsts: dict[tuple[str, str], set[tuple[int, ...]]] = {}
    for cell, flags in CELLS.items():
        for _boot in range(2 if cell == ("on", "off") else 1):
            with engine_process(*flags) as (url, _proc):
                outs = [_ids(url, D3_SHORT_PROMPT) for _ in range(6)]
                longs = [_ids(url, D3_LONG_PROMPT) for _ in range(6)]
            assert len(set(outs[1:])) == 1, f"{cell}: requests 2..6 must agree"
            assert len(set(longs)) == 1, f"{cell}: the long prompt never diverges"
            assert (outs[0] != outs[1]) == (cell == ("on", "off")), cell
            firsts.setdefault(cell, set()).add(outs[0])
    assert len(firsts[("on", "off")]) == 1, "the divergent first response is the same bytes on every boot"
