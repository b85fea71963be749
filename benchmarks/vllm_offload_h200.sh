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
#   stage-pdw        item 3's wheels: copy the carried .pdw/ into /tmp/pdw (nixl-cu13's 59 MB wheel fills one call
#                    of its own; vllm-router's and nixl's go with the install call)
#   lmcache-install  item 4: LMCache's wheel from the carried .lmcache/ (lmcache 0.5.3, the newest built against
#                    torch 2.11.0 with CUDA 13, and the few of its imports the image lacks) installed with
#                    --no-deps, the connector's import chain tried and written to lmcache-install.txt
#   pd-install       item 3: NIXL and vllm-router from /tmp/pdw into /tmp/site, their versions into versions.txt
#   start-items      items 3 and 4 as four lanes, detached (setsid): the two LMCache cells of the scenario written
#                    from offload.toml (the tier's flags out, LMCacheConnectorV1 with a 4 GiB local CPU store in,
#                    VLLM_BATCH_INVARIANT 1 and 0; LMCACHE_PER_LEVEL canaries a level, default 8, at
#                    LMCACHE_LEVELS, default [0, 8, 24]) where the adapter imported, and the two P/D cells of
#                    benchmarks/vllm_offload/pd.toml where vllm-router imports; `wait`, then `collect`
#   The calls of the run that gave the results, after the three `vllm_why_h200.sh stage` calls (each with one
#   piece of .stage/), .pdw/ holding nixl-cu13's wheel, then .pdw/ holding vllm-router's and nixl's with .lmcache/:
#     bash benchmarks/vllm_offload_h200.sh stage-pdw
#     bash benchmarks/vllm_offload_h200.sh stage-pdw && bash benchmarks/vllm_why_h200.sh install &&
#       bash benchmarks/vllm_offload_h200.sh lmcache-install pd-install start-items;
#       WAIT_S=400 bash benchmarks/vllm_offload_h200.sh wait collect
#   (the four lanes took 4.5 minutes on an H200; where they outlast the call, `wait collect` again); `compare` may
#   run there too, or from the collected run folders anywhere (`loadgen matrix FILE --out DIR --reuse`)
#   The wheels, made here (docs/results/vllm-offload-h200/README.md has the list and why each is there):
#     pip download --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 ... --no-deps \
#       -d .lmcache lmcache==0.5.3 aiofile caio cryptography cffi pycparser nvtx redis \
#       opentelemetry-api==1.40.0 opentelemetry-sdk==1.40.0 opentelemetry-semantic-conventions==0.61b0 \
#       opentelemetry-exporter-prometheus==0.61b0 'importlib-metadata<8.8'
#     pip download (the same flags) -d .pdw nixl==1.5.1 nixl-cu13==1.5.1 vllm-router==0.1.17
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
PD=benchmarks/vllm_offload/pd.toml
PD_VERSIONS_PY='from importlib.metadata import version
print("nixl", version("nixl"), "nixl-cu13", version("nixl-cu13")); print("vllm-router", version("vllm-router"))'

lane() {  # FILE FOLDER CELL...: each cell in turn into $R/FOLDER
    local file=$1 folder=$2 cell
    shift 2
    for cell in "$@"; do
        log "lane $cell"
        cmd timeout 1500 python3 -m loadgen matrix "$file" --cells "$cell" --out "$R/$folder" >>"$R/lane-$cell.out" 2>&1
        log "lane $cell exit $?"
    done
}

cells() {
    env_up
    cp /tmp/vllm-why-results/versions.txt "$R/" 2>/dev/null
    python3 -c 'import vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector as m; print("offloading connector:", m.__name__)' \
        >>"$R/versions.txt" 2>&1
    lane "$SCENARIO" offload tier-bi1 &
    lane "$SCENARIO" offload tier-bi0 &
    lane "$SCENARIO" offload no-tier-bi1 &
    wait
    log "every lane done"
}

compare() {  # per study, every reported cell compared together (nothing is run again)
    env_up
    local file folder done
    for file in "$SCENARIO:offload" "$R/scenario-files/lmcache.toml:lmcache" "$PD:pd"; do
        folder=${file##*:} file=${file%:*}
        [ -d "$R/$folder/cells" ] || continue
        done=$(cd "$R/$folder/cells" && for c in */; do ls "$c"*/report.json >/dev/null 2>&1 && echo "${c%/}"; done | paste -sd,)
        [ -n "$done" ] || continue
        cmd python3 -m loadgen matrix "$file" --out "$R/$folder" --reuse --cells "$done" --quiet >"$R/compare-$folder.out" 2>&1
        log "compare $folder: exit $?"
    done
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

lmcache_install() {  # item 4: the wheels, then the import chain into lmcache-install.txt
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
}

pd_install() {  # item 3: NIXL and vllm-router, as benchmarks/vllm_pd_h200.sh installs them
    env_up
    log "pd: install $(cd /tmp/pdw && ls *.whl | paste -sd' ')"
    cmd python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/pdw/*.whl
    python3 -c "$PD_VERSIONS_PY" 2>&1 | tee -a "$R/versions.txt"
}

items() {  # items 3 and 4 side by side on the one GPU: each study's cells in lanes of their own
    env_up
    if grep -q '^adapter imports' "$R/lmcache-install.txt" 2>/dev/null; then
        lmcache_scenario
        lane "$R/scenario-files/lmcache.toml" lmcache lmcache-bi1 &
        lane "$R/scenario-files/lmcache.toml" lmcache lmcache-bi0 &
    else
        log "lmcache: the adapter does not import (lmcache-install.txt); no LMCache cell"
    fi
    if python3 -c 'import vllm_router' 2>/dev/null; then
        lane "$PD" pd pd-bi0 &
        lane "$PD" pd pd-bi1 &
    else
        log "pd: vllm_router does not import; no P/D cell"
    fi
    wait
    log "every lane done"
}

for stage in "$@"; do
    case $stage in
        cells | compare | collect | items) $stage ;;
        lmcache-scenario) lmcache_scenario ;;
        lmcache-install) lmcache_install ;;
        pd-install) pd_install ;;
        stage-pdw) mkdir -p /tmp/pdw && cp .pdw/*.whl /tmp/pdw/ && ls -la /tmp/pdw ;;
        start) detached benchmarks/vllm_offload_h200.sh cells && mv "$R/cells.pid" "$R/matrix.pid" ;;
        start-items) detached benchmarks/vllm_offload_h200.sh items && mv "$R/items.pid" "$R/matrix.pid" ;;
        wait) wait_for matrix "${WAIT_S:-540}" ;;
        *) echo "unknown stage $stage" >&2; exit 2 ;;
    esac
done
