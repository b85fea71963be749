#!/usr/bin/env bash
# Real vLLM 0.26 on one H200: where each canary's KV came from through vLLM's built-in CPU offload tier, measured by
# the tool itself (issue 53; results in docs/results/vllm-offload-h200/, whose README says what each table shows).
#
# Why this script exists: it is the one command list behind those results. The machine gets what it lacks exactly
# as benchmarks/vllm_why_h200.sh stages it (the kit's two parts, Locust's wheels and the code model, in 60 MB
# pieces of .stage/, one piece a device call, docs/results/ moved out of the checkout for those calls), and that
# script's `stage` and `install` do it; every engine is then started by `loadgen matrix`, so the step-trace plugin
# writes each request's local/external prompt tokens (vLLM's prefill_stats) into its cell's run folder.
#
# Stages, one device call each unless said, back to back (the machine keeps /tmp only while held, ~30 s idle):
#   stage, install   benchmarks/vllm_why_h200.sh's (bash benchmarks/vllm_why_h200.sh stage; ... install)
#   start            the three cells of benchmarks/vllm_offload/offload.toml as three lanes, detached (setsid);
#                    each engine takes 8% of the GPU's memory and a 4 GiB CPU tier
#   wait             waits up to WAIT_S seconds (default 540); name `collect` after it, in the same call
#   compare          `loadgen matrix --reuse`: every reported cell compared together, then `collect`
#   collect          results.tar.gz (reports, traces, logs, commands) and records.tar.gz (canary records)
#   lmcache          item 4, in the call after `install`'s (nothing else of the kit is carried again): LMCache's
#                    wheel from the carried .lmcache/ (lmcache 0.5.3, the newest built against torch 2.11.0 with
#                    CUDA 13, and the few of its imports the image lacks) installed with --no-deps, the
#                    connector's import chain tried and written to lmcache-install.txt; then, if it imports, the
#                    two cells of the scenario written from offload.toml (the tier's flags out,
#                    LMCacheConnectorV1 with a 4 GiB local CPU store in), VLLM_BATCH_INVARIANT 0 and 1, side by
#                    side for at most LANE_S seconds (default 400; LMCACHE_PER_LEVEL canaries a level, default 8,
#                    at LMCACHE_LEVELS, default [0, 8, 24]), then `collect` in the same call
#   The wheels, made here (docs/results/vllm-offload-h200/README.md has the list and why each is there):
#     pip download --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 ... --no-deps \
#       -d .lmcache lmcache==0.5.3 aiofile caio cryptography cffi pycparser nvtx redis \
#       opentelemetry-api==1.40.0 opentelemetry-sdk==1.40.0 opentelemetry-semantic-conventions==0.61b0 \
#       opentelemetry-exporter-prometheus==0.61b0 'importlib-metadata<8.8'
#
# Usage: bash benchmarks/vllm_offload_h200.sh STAGE [STAGE...]. Send a call's output to a file and print it after.
KIT=vllm
KIT_DIR=/tmp/vk
VERSIONS_PY='import sys, torch, vllm, transformers, locust
print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda)
print("vllm", vllm.__version__); print("transformers", transformers.__version__); print("locust", locust.__version__)'
RESULTS=${RESULTS:-/tmp/vllm-offload-results}
# shellcheck source=benchmarks/h200_common.sh
. "$(dirname "${BASH_SOURCE[0]}")/h200_common.sh"  # OUT, R, log, cmd, tar_run, detached, wait_for
env_up() {
    # shellcheck disable=SC1091
    . /tmp/bundle/env.sh
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
}
SCENARIO=benchmarks/vllm_offload/offload.toml

lane() {  # CELL: one cell into $R/offload
    log "lane $1"
    cmd timeout 1500 python3 -m loadgen matrix "$SCENARIO" --cells "$1" --out "$R/offload" >>"$R/lane-$1.out" 2>&1
    log "lane $1 exit $?"
}

cells() {
    env_up
    cp /tmp/vllm-why-results/versions.txt "$R/" 2>/dev/null
    python3 -c 'import vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector as m; print("offloading connector:", m.__name__)' \
        >>"$R/versions.txt" 2>&1
    lane tier-bi1 &
    lane tier-bi0 &
    lane no-tier-bi1 &
    wait
    log "every lane done"
}

compare() {
    env_up
    local done
    done=$(cd "$R/offload/cells" && for c in */; do ls "$c"*/report.json >/dev/null 2>&1 && echo "${c%/}"; done | paste -sd,)
    cmd python3 -m loadgen matrix "$SCENARIO" --out "$R/offload" --reuse --cells "$done" --quiet >"$R/compare.out" 2>&1
    log "compare: exit $?"
}

collect() {
    tar_run --exclude='*.parquet'
}

lmcache_cell() {  # BI: one LMCacheConnectorV1 cell of the scenario, VLLM_BATCH_INVARIANT=BI, a 4 GiB local CPU store
    printf '\n[[matrix.cells]]\nname = "lmcache-bi%s"\nkv_offload = false\n' "$1"
    printf 'args = ["--kv-transfer-config", "{\\"kv_connector\\":\\"LMCacheConnectorV1\\",\\"kv_role\\":\\"kv_both\\"}"]\n'
    printf 'env = { VLLM_BATCH_INVARIANT = "%s", LMCACHE_CHUNK_SIZE = "256", LMCACHE_LOCAL_CPU = "True", ' "$1"
    printf 'LMCACHE_MAX_LOCAL_CPU_SIZE = "4", LMCACHE_TRACK_USAGE = "false" }\n'
    printf 'labels = { batch_invariant = "%s", kv_tier = "lmcache-cpu-4g" }\n' "$1"
    [ "$1" = 1 ] || printf 'compare_to = "lmcache-bi1"\n'
}

lmcache_scenario() {  # $R/scenario-files/lmcache.toml: offload.toml, its tier's flag and cells replaced by LMCache's
    mkdir -p "$R/scenario-files"
    sed -e '/^kv_offload = { size_gib/d' -e '/^\[\[matrix.cells\]\]/,$d' -e 's/^name = "vllm-offload"/name = "vllm-lmcache"/' \
        -e "s/^canaries_per_level = .*/canaries_per_level = ${LMCACHE_PER_LEVEL:-8}/" \
        -e "s/^levels = .*/levels = ${LMCACHE_LEVELS:-[0, 8, 24]}/" \
        "$SCENARIO" >"$R/scenario-files/lmcache.toml" &&
        { lmcache_cell 1; lmcache_cell 0; } >>"$R/scenario-files/lmcache.toml"
}

lmcache() {  # item 4: install, the import chain, then the two cells if it imports
    env_up
    cp /tmp/vllm-why-results/versions.txt "$R/" 2>/dev/null
    log "lmcache: install"
    cmd python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .lmcache/*.whl >"$R/lmcache-install.txt" 2>&1
    {
        echo "pip exit $?"
        python3 -c 'from importlib.metadata import version; print("lmcache", version("lmcache"))
import torch, lmcache.c_ops; print("lmcache.c_ops loads under torch", torch.__version__)
from lmcache.integration.vllm.vllm_v1_adapter import LMCacheConnectorV1Impl as c; print("adapter imports:", c.__name__)
import vllm.distributed.kv_transfer.kv_connector.v1.lmcache_connector as m; print("connector imports:", m.__name__)'
        python3 -c 'from vllm.distributed.kv_transfer.kv_connector.v1 import lmcache_integration as m
print("native adapter (use_native) imports:", m.vllm_v1_adapter.__name__)' 2>&1 | tail -1
    } >>"$R/lmcache-install.txt" 2>&1
    cat "$R/lmcache-install.txt"
    grep -q '^adapter imports' "$R/lmcache-install.txt" || { log "lmcache: the adapter does not import"; return 1; }
    lmcache_scenario
    for cell in lmcache-bi1 lmcache-bi0; do
        (log "lane $cell"
            cmd timeout "${LANE_S:-400}" python3 -m loadgen matrix "$R/scenario-files/lmcache.toml" --cells "$cell" \
                --out "$R/lmcache" >>"$R/lane-$cell.out" 2>&1
            log "lane $cell exit $?") &
    done
    wait
    log "lmcache: every lane done"
}

for stage in "$@"; do
    case $stage in
        cells | compare | collect | lmcache) $stage ;;
        lmcache-scenario) lmcache_scenario ;;
        start) detached benchmarks/vllm_offload_h200.sh cells && mv "$R/cells.pid" "$R/matrix.pid" ;;
        wait) wait_for matrix "${WAIT_S:-540}" ;;
        *) echo "unknown stage $stage" >&2; exit 2 ;;
    esac
done
