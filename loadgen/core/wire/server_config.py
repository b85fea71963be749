"""What a server says about its own configuration, read into a few comparable settings.

Why: two runs of "the same endpoint" are only comparable when they ran the same engine settings
(prefix caching on or off, batch-invariant kernels, CUDA graphs or eager, tensor parallelism and its
all-reduce). Engines publish some of
that: vLLM as ``*_info`` series in ``/metrics`` (``vllm:cache_config_info``: ``enable_prefix_caching``,
``block_size``) and, with ``VLLM_SERVER_DEV_MODE=1``, its whole config and ``VLLM_*`` variables at
``GET /server_info?config_format=json``; SGLang its server arguments at ``GET /get_server_info``.
This module turns those answers into ``settings`` (None where the server did not say) and keeps the
raw ``*_info`` labels beside them (docs/design.md, "Server configuration").

Pure: texts and decoded JSON in, a plain dict out. Reading the routes is the probe's job; this must
not do I/O, and must not guess a setting the server did not state.
"""

from __future__ import annotations

import math
import re
from typing import Any

# name{labels} value: the info series are gauges of value 1 whose labels carry the settings
_INFO_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*_info)\{(.*)\}\s+\S+(?:\s+-?\d+)?\s*$")  # value [timestamp]
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_MAX_INFO_SERIES = 32  # a hostile /metrics cannot grow the manifest without end
_MAX_LABEL_CHARS = 200
_MAX_LABELS = 64


def info_series(metrics_text: str) -> dict[str, dict[str, str]]:
    """Every ``*_info`` series of a Prometheus text exposition: name -> labels (first sample of each name)."""
    out: dict[str, dict[str, str]] = {}
    for line in metrics_text.splitlines():
        m = _INFO_LINE.match(line)
        if m is None or m.group(1) in out:
            continue
        labels = _LABEL.findall(m.group(2))[:_MAX_LABELS]
        out[m.group(1)] = {k[:_MAX_LABEL_CHARS]: v[:_MAX_LABEL_CHARS] for k, v in labels}
        if len(out) >= _MAX_INFO_SERIES:
            break
    return out


def _flag(value: Any) -> bool | None:
    """A boolean as servers spell it ("True", "false", "1", 0, True); None for anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return bool(value) if value in (0, 1) else None
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
    return None


def _int(value: Any) -> int | None:
    try:
        return int(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _negated(value: bool | None) -> bool | None:
    """``disable_*`` flags read as the setting they switch off; unstated stays None."""
    return None if value is None else not value


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _stated(value: Any) -> Any:
    """A setting kept as the server spells it, capped as an info series' label is: a string cut to
    ``_MAX_LABEL_CHARS``, a number or flag as it is; anything else (a list, an object) is not a setting's
    spelling: None. A hostile ``/server_info`` cannot grow the manifest and every report without end."""
    if isinstance(value, str):
        return value[:_MAX_LABEL_CHARS]
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return None


def server_settings(
    info: dict[str, dict[str, str]], server_info: Any, sglang_info: Any, *, cached_tokens_reported: bool | None
) -> dict[str, Any]:
    """The comparable settings, each None where no answer stated it.

    ``info``: ``info_series`` of ``/metrics``; ``server_info``: vLLM's ``/server_info`` JSON (dev mode);
    ``sglang_info``: SGLang's ``/get_server_info`` JSON; ``cached_tokens_reported``: whether the probe's
    answer carried ``usage.prompt_tokens_details.cached_tokens``.
    """
    cache_info = info.get(CACHE_INFO, {})
    vcfg = _get(server_info, "vllm_config")
    venv = _get(server_info, "vllm_env")
    sg = sglang_info if isinstance(sglang_info, dict) else {}
    sg_radix_off = _flag(sg.get("disable_radix_cache"))
    return {
        "prefix_caching": _first(
            _flag(cache_info.get("enable_prefix_caching")),
            _flag(_get(vcfg, "cache_config", "enable_prefix_caching")),
            None if sg_radix_off is None else not sg_radix_off,
        ),
        "block_size": _first(
            _int(cache_info.get("block_size")),
            _int(_get(vcfg, "cache_config", "block_size")),
            _int(sg.get("page_size")),
        ),
        "batch_invariant": _first(
            _flag(_get(venv, "VLLM_BATCH_INVARIANT")), _flag(sg.get("enable_deterministic_inference"))
        ),
        "enforce_eager": _first(
            _flag(_get(vcfg, "model_config", "enforce_eager")), _flag(sg.get("disable_cuda_graph"))
        ),
        "attention_backend": _stated(
            _first(
                _get(vcfg, "attention_config", "backend"),
                _get(venv, "VLLM_ATTENTION_BACKEND"),
                sg.get("attention_backend"),
            )
        ),
        "max_num_seqs": _first(
            _int(_get(vcfg, "scheduler_config", "max_num_seqs")), _int(sg.get("max_running_requests"))
        ),
        "dtype": _stated(_first(_get(vcfg, "model_config", "dtype"), sg.get("dtype"))),
        "tensor_parallel_size": _first(
            _int(_get(vcfg, "parallel_config", "tensor_parallel_size")), _int(sg.get("tp_size"))
        ),
        "custom_all_reduce": _negated(
            _first(
                _flag(_get(vcfg, "parallel_config", "disable_custom_all_reduce")),
                _flag(sg.get("disable_custom_all_reduce")),
            )
        ),
        # every how many engine steps its /metrics running gauge is refreshed (SGLang: every decode_log_interval
        # decode steps, and at each prefill); None where the server does not say (vLLM: every step)
        "metrics_refresh_steps": _int(sg.get("decode_log_interval")),
        "cached_tokens_reported": cached_tokens_reported,
    }


CACHE_INFO = "vllm:cache_config_info"  # the series whose labels state the KV cache's settings


def gpu_cache_tokens(info: dict[str, dict[str, str]]) -> int | None:
    """How many tokens the GPU KV cache holds, as ``CACHE_INFO`` states it (``num_gpu_blocks`` x ``block_size``;
    vLLM and the embedded engine); None where a label is absent or not a positive number (vLLM's "None")."""
    labels = info.get(CACHE_INFO, {})
    blocks, size = _int(labels.get("num_gpu_blocks")), _int(labels.get("block_size"))
    return blocks * size if blocks and size and blocks > 0 and size > 0 else None


def describe(settings: dict[str, Any]) -> str:
    """One line for a report header: only what the server stated, e.g. "prefix caching on (block 16),
    batch-invariant off, CUDA graphs"; "" when it stated nothing."""
    parts = []
    on_off = {True: "on", False: "off"}
    if settings.get("prefix_caching") is not None:
        block = f" (block {settings['block_size']})" if settings.get("block_size") else ""
        parts.append(f"prefix caching {on_off[settings['prefix_caching']]}{block}")
    if settings.get("batch_invariant") is not None:
        parts.append(f"batch-invariant {on_off[settings['batch_invariant']]}")
    if settings.get("enforce_eager") is not None:
        parts.append("eager" if settings["enforce_eager"] else "CUDA graphs")
    if settings.get("attention_backend"):
        parts.append(f"attention {settings['attention_backend']}")
    if settings.get("max_num_seqs"):
        parts.append(f"max {settings['max_num_seqs']} sequences")
    if settings.get("tensor_parallel_size"):  # one rank reduces nothing: the all-reduce is said from two on
        reduce = settings.get("custom_all_reduce")
        one = settings["tensor_parallel_size"] == 1
        how = "" if reduce is None or one else f" (custom all-reduce {on_off[reduce]})"
        parts.append(f"tensor parallel {settings['tensor_parallel_size']}{how}")
    if settings.get("cached_tokens_reported") is False:
        parts.append("cached tokens not reported")
    return ", ".join(parts)
