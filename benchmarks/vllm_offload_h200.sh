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

for stage in "$@"; do
    case $stage in
        cells | compare | collect) $stage ;;
        start) detached benchmarks/vllm_offload_h200.sh cells && mv "$R/cells.pid" "$R/matrix.pid" ;;
        wait) wait_for matrix "${WAIT_S:-540}" ;;
        *) echo "unknown stage $stage" >&2; exit 2 ;;
    esac
done
