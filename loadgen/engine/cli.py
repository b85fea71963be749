"""Command line of the embedded engine: ``python -m loadgen.engine`` and ``loadgen serve``.

Why this module exists: launchers start the engine as a process and read its stdout until the
line ``READY http://HOST:PORT`` (printed once, after the socket accepts connections, flushed);
SIGTERM and SIGINT stop it cleanly with exit code 0. This is the only module that prints.
``--role prefill|decode`` makes the server one side of a disaggregated pair behind vllm-router
(loadgen/engine/pd.py); ``--role both``, the default, serves either leg and plain requests alike. A server
fetches KV only from the prefill servers ``--kv-peers`` names (none by default).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import cast

from aiohttp import web

from loadgen.core.errors import EngineError, RunFolderError, UsageError
from loadgen.core.steptrace import ENV as STEP_TRACE_ENV
from loadgen.engine.faults import FaultPlan, add_fault_arguments
from loadgen.engine.offload import DTYPES
from loadgen.engine.pd import ROLES, SELF, PDConfig, advertised_host, parse_peers
from loadgen.engine.plan import InvariantPaths
from loadgen.engine.runner import EngineOptions, EngineRunner, build_scheduler
from loadgen.engine.scheduler import Scheduler
from loadgen.engine.server import Served, build_app

# The engine thread and the HTTP loop share the GIL; a short switch interval keeps token
# delivery from waiting behind a whole step.
SWITCH_INTERVAL_S = 0.001


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loadgen serve",
        description="Embedded CPU engine: an OpenAI-compatible server whose numerics depend on batch shape "
        "and prefix-cache state, as GPU engines' do.",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--backend",
        choices=["cpu", "gpu"],
        default="cpu",
        help="cpu: the numpy model; gpu: a bf16 transformers model on CUDA (needs torch and transformers)",
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="gpu backend: a local transformers checkpoint folder (default: a seeded random Qwen3, no download)",
    )
    p.add_argument("--port", type=int, default=8000, help="0 binds a free port (see the READY line)")
    p.add_argument(
        "--batch-invariant",
        action="store_true",
        help="one fixed reduction order for every shape: logits independent of batch and cache",
    )
    p.add_argument(
        "--invariant-paths",
        default=None,
        metavar="PATHS",
        help="fix only these reduction paths, comma-separated, of matmul, attention, norm, step_kind "
        "(e.g. matmul,attention,norm: only the kind of step moves a decode row, as vLLM with VLLM_BATCH_INVARIANT=1)",
    )
    p.add_argument(
        "--step-trace",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"write one line per engine step into DIR (default: the folder ${STEP_TRACE_ENV} names; unset: none)",
    )
    p.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="cache KV of full 16-token prompt blocks (default on, as in vLLM)",
    )
    p.add_argument(
        "--enable-prompt-tokens-details",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="report usage.prompt_tokens_details.cached_tokens (default on; vLLM's default is off)",
    )
    p.add_argument("--max-num-seqs", type=int, default=64, help="most sequences in one step")
    p.add_argument("--max-num-batched-tokens", type=int, default=2048, help="token budget of one step")
    p.add_argument("--max-model-len", type=int, default=512, help="prompt + completion tokens per sequence")
    p.add_argument("--prefix-cache-blocks", type=int, default=1024, help="prefix-cache capacity in blocks")
    o = p.add_argument_group("offload tier (vLLM's CPU KV offloading)")
    o.add_argument(
        "--kv-offloading-size",
        type=float,
        default=None,
        metavar="GIB",
        help="keep every computed 16-token prompt block in an offload tier of GIB GiB (LRU), and load the blocks "
        "the prefix cache lacks from it (default: no tier)",
    )
    o.add_argument(
        "--kv-offloading-backend",
        type=_native_only,
        default="native",
        metavar="native",
        help="the tier's implementation: native only (vLLM's lmcache needs an LMCache server)",
    )
    o.add_argument(
        "--kv-offloading-dtype",
        choices=DTYPES,
        default="bf16",
        help="the dtype the tier stores K/V at: bf16 (default) an exact copy, as vLLM's native tier; fp8 scaled "
        "float8 e4m3, reassembled on load, so a reload changes numerics",
    )
    p.add_argument("--seed", type=int, default=0, help="weight seed: same seed, same model")
    p.add_argument(
        "--logit-scale",
        type=float,
        default=4.0,
        help="weight of the contextual logits against the fixed unigram prior; lower values flatten the top "
        "of the distribution, so more near-ties are decided by rounding (more divergence under load)",
    )
    g = p.add_argument_group("prefill and decode roles (behind vllm-router --vllm-pd-disaggregation)")
    g.add_argument(
        "--role",
        choices=ROLES,
        default="both",
        help="prefill: hand over each prefill leg's KV (kv_transfer_params.do_remote_decode); decode: fetch a "
        "prefill server's KV (do_remote_prefill) and decode from it; both (default): either, and plain requests",
    )
    g.add_argument(
        "--kv-peers",
        action="append",
        default=[],
        metavar="HOST:PORT,...",
        help=f"decode (or both): the prefill servers whose KV this server may fetch, as their answers name them "
        f"(remote_host:remote_port); {SELF!r}: this server's own side channel; repeatable. Default: none, so a "
        "decode leg naming any other address is refused (400) and nothing is fetched",
    )
    g.add_argument(
        "--kv-fetch-timeout", type=float, default=10.0, help="decode: seconds to fetch a KV before answering 504"
    )
    g.add_argument(
        "--recompute-last-prompt-token",
        action="store_true",
        help="decode: as vLLM's decode server, load the KV of every prompt position but the last, recompute the "
        "last prompt token here and sample the first token here (default: take the prefill server's first token)",
    )
    g.add_argument(
        "--kv-transfer-ttl", type=float, default=60.0, help="prefill: seconds a KV waits for its decode server"
    )
    g.add_argument(
        "--kv-transfer-max-mib", type=float, default=256.0, help="prefill: MiB of KV kept waiting; oldest go first"
    )
    add_fault_arguments(p)
    return p


def _native_only(value: str) -> str:
    if value != "native":
        raise argparse.ArgumentTypeError(
            f"{value!r}: the embedded engine's offload tier is native only (lmcache needs a separate LMCache server)"
        )
    return value


def roles_from_args(args: argparse.Namespace, host: str) -> PDConfig:
    if min(args.kv_fetch_timeout, args.kv_transfer_ttl, args.kv_transfer_max_mib) <= 0:
        raise SystemExit("loadgen serve: --kv-fetch-timeout, --kv-transfer-ttl and --kv-transfer-max-mib must be > 0")
    if args.role != "both" and args.backend != "cpu":
        raise SystemExit(f"loadgen serve: --role {args.role} needs --backend cpu (the GPU backend hands over no KV)")
    try:
        peers = parse_peers(args.kv_peers)
    except ValueError as exc:
        raise SystemExit(f"loadgen serve: {exc}") from None
    if peers and args.role == "prefill":
        raise SystemExit("loadgen serve: --kv-peers is for a server that decodes; --role prefill fetches nothing")
    if peers and args.backend != "cpu":
        raise SystemExit("loadgen serve: --kv-peers needs --backend cpu (the GPU backend loads no KV)")
    return PDConfig(
        role=args.role,
        seed=args.seed,
        batch_invariant=args.batch_invariant,
        fetch_timeout_s=args.kv_fetch_timeout,
        transfer_ttl_s=args.kv_transfer_ttl,
        transfer_max_bytes=int(args.kv_transfer_max_mib * (1 << 20)),
        host=advertised_host(host),
        peers=peers,
    )


def options_from_args(args: argparse.Namespace) -> EngineOptions:
    if args.max_num_seqs < 1 or args.max_model_len < 2 or args.max_num_batched_tokens < 1:
        raise SystemExit("loadgen serve: --max-num-seqs, --max-model-len and --max-num-batched-tokens must be positive")
    if args.logit_scale <= 0:
        raise SystemExit("loadgen serve: --logit-scale must be > 0")
    paths: InvariantPaths | None = None
    if args.invariant_paths is not None:
        if args.batch_invariant:
            raise SystemExit(
                "loadgen serve: --batch-invariant fixes every path; give it or --invariant-paths, not both"
            )
        if args.backend != "cpu":
            raise SystemExit("loadgen serve: --invariant-paths needs --backend cpu (the GPU backend has no such paths)")
        try:
            paths = InvariantPaths.named(args.invariant_paths)
        except UsageError as exc:
            raise SystemExit(f"loadgen serve: {exc}") from None
    if args.kv_offloading_size is not None and not args.kv_offloading_size > 0:
        raise SystemExit("loadgen serve: --kv-offloading-size must be > 0 GiB")
    if args.kv_offloading_size is not None and args.backend != "cpu":
        raise SystemExit("loadgen serve: --kv-offloading-size needs --backend cpu (the GPU backend caches no KV)")
    trace = args.step_trace or (Path(os.environ[STEP_TRACE_ENV]) if os.environ.get(STEP_TRACE_ENV) else None)
    return EngineOptions(
        batch_invariant=args.batch_invariant,
        enable_prefix_caching=args.enable_prefix_caching,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        seed=args.seed,
        logit_scale=args.logit_scale,
        prefix_cache_blocks=args.prefix_cache_blocks,
        recompute_last=args.recompute_last_prompt_token,
        paths=paths,
        step_trace=trace,
        kv_offloading_size=args.kv_offloading_size,
        kv_offloading_dtype=args.kv_offloading_dtype,
    )


def faults_from_args(args: argparse.Namespace) -> FaultPlan:
    try:
        return FaultPlan.from_args(args)
    except UsageError as exc:
        raise SystemExit(f"loadgen serve: {exc}") from None


def make_scheduler(opts: EngineOptions, backend: str = "cpu", checkpoint: Path | None = None) -> Scheduler:
    """The CPU scheduler, or the GPU one (imported only here, so CPU installs never import torch)."""
    try:
        return _make_scheduler(opts, backend, checkpoint)
    except (OSError, RunFolderError) as exc:
        raise SystemExit(f"loadgen serve: cannot write the step trace into {opts.step_trace}: {exc}") from None


def _make_scheduler(opts: EngineOptions, backend: str, checkpoint: Path | None) -> Scheduler:
    if backend == "cpu":
        return build_scheduler(opts)
    try:
        from loadgen.engine.gpu.build import build_gpu_scheduler
    except ImportError as exc:
        raise SystemExit(f"loadgen serve --backend gpu needs torch and transformers ({exc})") from None
    try:
        # GpuScheduler offers every attribute the runner, the handlers and /metrics read of a Scheduler.
        return cast(Scheduler, build_gpu_scheduler(opts, checkpoint))
    except EngineError as exc:
        raise SystemExit(str(exc)) from None


async def serve(
    opts: EngineOptions,
    host: str,
    port: int,
    faults: FaultPlan | None = None,
    backend: str = "cpu",
    checkpoint: Path | None = None,
    prompt_tokens_details: bool = True,
    roles: PDConfig | None = None,
) -> None:
    """Run until SIGTERM/SIGINT; prints the READY line once listening."""
    loop = asyncio.get_running_loop()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    runner = EngineRunner(make_scheduler(opts, backend, checkpoint), loop)
    runner.start()
    served = Served(
        opts.enable_prefix_caching,
        opts.batch_invariant,
        opts.max_num_seqs,
        prompt_tokens_details,
        num_gpu_blocks=opts.prefix_cache_blocks,
        kv_offloading_size=opts.kv_offloading_size,
    )
    roles = roles or PDConfig(seed=opts.seed, batch_invariant=opts.batch_invariant)
    app_runner = web.AppRunner(
        build_app(runner, faults, served, roles, bind_host=host), handler_cancellation=True, access_log=None
    )
    try:  # a port that cannot be bound ends here too: the app's cleanup closes what its setup opened
        await app_runner.setup()
        site = web.TCPSite(app_runner, host, port)
        await site.start()
        bound = app_runner.addresses[0][1]
        roles.port = bound  # a prefill answer's remote_port: the side channel is this server's own port
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(f"READY http://{host}:{bound}", flush=True)
        await stop.wait()
    finally:
        await app_runner.cleanup()
        runner.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    opts = options_from_args(args)
    faults = faults_from_args(args)
    roles = roles_from_args(args, args.host)
    try:
        asyncio.run(
            serve(
                opts,
                args.host,
                args.port,
                faults,
                args.backend,
                args.checkpoint,
                args.enable_prompt_tokens_details,
                roles,
            )
        )
    except OSError as exc:
        print(f"loadgen serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    return 0
