#!/usr/bin/env bash
# Real vLLM 0.26 disaggregated prefill/decode on H200 GPUs, measured by the tool itself.
#
# Why this script exists: it is the one command list behind docs/results/vllm-pd-h200/ (its README says
# what each cell showed). On the GPU machine, vLLM comes from the offline kit (two bundle parts, a seeded
# random Qwen3 made on the GPU), NIXL and vllm-router from their wheels; every engine, pair and router is
# started by `loadgen matrix` itself (benchmarks/vllm/pd-h200.toml). A device call carries at most 64 MiB,
# the repository included, so the files come in five calls, back to back (the machine keeps /tmp while held).
# The nixl-cu13 wheel (56 MiB) does not fit beside the repository: split it into two halves first,
#   split -b 30000000 nixl_cu13-1.5.1-cp312-cp312-manylinux_2_28_x86_64.whl .nixl/nixl_cu13-1.5.1-cp312-cp312-manylinux_2_28_x86_64.whl.part.
# and carry one half per stage-nixl call (.nixl/*.part.aa, then .nixl/*.part.ab):
#
#   stage-part0   carried .vllm/vllm-bundle.part.00           -> /tmp/vk
#   stage-nixl    carried .nixl/ (one half of nixl-cu13)      -> /tmp/nixl-parts (twice)
#   stage-router  carried .pdw/ (vllm-router, nixl)           -> /tmp/pdw
#   install       carried .vllm/vllm-bundle.part.01, .sha256 and .whl/: the kit, Locust, NIXL, the router,
#                 the model (benchmarks/h200_common.sh)
#   start-matrix  the lanes below, detached (setsid) so that they outlive the call
#   wait-matrix   waits up to WAIT_S seconds (default 540); then `collect`, in the same call, every call
#   collect       results.tar.gz (reports, logs, commands) and records.tar.gz (canary and metrics records)
#   compare       `loadgen matrix --reuse` per study: every cell's reported run, compared together
#
# The machine is given back after about 30 s without a call, and with it /tmp: make every call right after
# the one before (install start-matrix wait-matrix collect, then wait-matrix collect until the lanes are
# done, then compare collect), and read the results only after the last.
#
# Four lanes run side by side, each a sequence of `loadgen matrix --cells` shares into one folder per study
# ($R/pd-h200, $R/pd-h200-decode-load), so that `compare` finds every cell. One GPU: every instance shares
# it, each with a fixed KV cache, at most 7 at a time (12 at once slowed NIXL's transfers on one GPU to
# seconds each and starved the eager pairs); two or more GPUs: the decode side of every pair on GPU 1.
# The decode-load study is pd-h200.toml with background.side = "decode", written into the results. The
# decoder's own reload runs only there: ExampleConnector stores every prompt's KV, and the prefill-side
# background's long prompts filled the 64 GiB disk in minutes.
#   D pd-same-kernel, P pd-same-kernel, P graphs-pd-same-kernel, D graphs-pd-same-kernel
#   D pd-foreign-prefill, P pd-foreign-prefill, P graphs-pd-foreign-prefill, D graphs-pd-foreign-prefill
#     (the graphs cell with the decoder asked directly)
#   D pd-both-invariant, P pd-both-invariant
#   D own-reload, P colocated-invariant, P colocated, D colocated, D colocated-invariant, P graphs-colocated,
#     D graphs-colocated (left out with PAIRS_ONLY=1)
# The pairs come first, the decode-load study before the prefill-load one. With NixlConnector (the decoder
# READs) NIXL moved 10 to 17 MB/s on one GPU and a pair's canary took 140 s at level 8 under prefill-side load;
# pd-h200.toml now takes NixlPushConnector, which moved a 19 MB prompt's KV in 70 to 190 ms. The colocated
# references of the committed run (SEEDS, the results folder) are copied in before the lanes start: `compare`
# takes each cell's newest reported run, so a pair whose session ends before this run's own references
# compares against those.
#
# Usage: bash benchmarks/vllm_pd_h200.sh STAGE [STAGE...]. Send a call's output to a file and print the file
# after (a device call piped into `tail` has printed nothing and waited out its limit).
KIT=vllm
KIT_DIR=/tmp/vk
VERSIONS_PY='import sys, torch, vllm, transformers, locust
print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda)
print("vllm", vllm.__version__); print("transformers", transformers.__version__); print("locust", locust.__version__)'
PD_VERSIONS_PY='from importlib.metadata import version
print("nixl", version("nixl"), "nixl-cu13", version("nixl-cu13")); print("vllm-router", version("vllm-router"))
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory  # is a push connector there?
print("kv connectors", " ".join(sorted(KVConnectorFactory._registry)))'
RESULTS=${RESULTS:-/tmp/vllm-pd-results}
# shellcheck source=benchmarks/h200_common.sh
. "$(dirname "${BASH_SOURCE[0]}")/h200_common.sh"  # OUT, R, MODEL, log, cmd, install, collect_results, tar_run, detached, wait_for
env_up() {
    # shellcheck disable=SC1091
    . /tmp/bundle/env.sh
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
}
SCENARIO=benchmarks/vllm/pd-h200.toml
SEEDS=${SEEDS:-docs/results/vllm-pd-h200}  # an earlier run of this script, committed

stage_from() {  # CARRIED_DIR DEST: what this call carried, into /tmp, where the next calls find it
    mkdir -p "$2" && cp -r "$1"/. "$2"/ && ls -la "$2"
}

join_nixl() {  # the carried halves of the nixl-cu13 wheel, joined into /tmp/pdw; the run stops without it
    local part wheel
    mkdir -p /tmp/pdw
    for part in /tmp/nixl-parts/*.whl.part.aa; do
        [ -e "$part" ] || break
        wheel=$(basename "${part%.part.aa}")
        cat "/tmp/nixl-parts/$wheel".part.* >"/tmp/pdw/$wheel"
    done
    ls /tmp/pdw/nixl_cu13-*.whl >/dev/null 2>&1 || { log "install: no nixl-cu13 wheel (stage-nixl, both halves)"; exit 1; }
}

install_pd() {
    join_nixl
    install
    log "install: nixl, nixl-cu13, vllm-router"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/pdw/*.whl
    python3 -c "$PD_VERSIONS_PY" >>"$R/versions.txt" 2>&1
    cat "$R/versions.txt"
}

scenarios() {  # the two studies' files under $R: as shipped, and with the decode side loaded
    local gpus
    gpus=$(gpu_count)
    mkdir -p "$R/scenario-files"
    if [ "$gpus" -ge 2 ]; then  # the decode side of every pair on its own GPU
        sed 's/^env = { CUDA_VISIBLE_DEVICES = "0" }  # decode GPU.*/env = { CUDA_VISIBLE_DEVICES = "1" }/' \
            "$SCENARIO" >"$R/scenario-files/pd-h200.toml"
    else
        cp "$SCENARIO" "$R/scenario-files/pd-h200.toml"
    fi
    sed -e 's/^side = "prefill"/side = "decode"/' -e 's/^name = "vllm-pd-h200"/name = "vllm-pd-h200-decode-load"/' \
        "$R/scenario-files/pd-h200.toml" >"$R/scenario-files/pd-h200-decode-load.toml"
    log "scenarios: $gpus GPU(s); $(grep -c CUDA_VISIBLE_DEVICES "$R/scenario-files/pd-h200.toml") side GPU lines"
}

lane() {  # NAME P|D:CELLS...: each share in turn (P the prefill-load study, D the decode-load one)
    local name=$1 spec study cells
    shift
    for spec in "$@"; do
        study=pd-h200 cells=${spec#*:}
        [ "${spec%%:*}" = D ] && study=pd-h200-decode-load
        log "lane $name: $study $cells"
        cmd timeout 1500 python3 -m loadgen matrix "$R/scenario-files/$study.toml" --cells "$cells" \
            --out "$R/$study" >>"$R/lane-$name.out" 2>&1
        log "lane $name: $study $cells exit $?"
    done
}

seed_references() {  # the committed run's reported colocated cells, where this run's own are not done in time
    local study cell
    for study in pd-h200 pd-h200-decode-load; do
        for cell in colocated colocated-invariant graphs-colocated; do
            [ -d "$SEEDS/$study/cells/$cell" ] || continue
            mkdir -p "$R/$study/cells" && cp -r "$SEEDS/$study/cells/$cell" "$R/$study/cells/"
            log "seed: $study $cell from $SEEDS"
        done
    done
}

matrix() {
    env_up
    scenarios
    seed_references
    lane same-kernel D:pd-same-kernel P:pd-same-kernel P:graphs-pd-same-kernel D:graphs-pd-same-kernel &
    lane foreign D:pd-foreign-prefill P:pd-foreign-prefill P:graphs-pd-foreign-prefill D:graphs-pd-foreign-prefill &
    lane invariant D:pd-both-invariant P:pd-both-invariant &
    [ -n "${PAIRS_ONLY:-}" ] ||
        lane single D:own-reload P:colocated-invariant P:colocated D:colocated D:colocated-invariant P:graphs-colocated \
            D:graphs-colocated &
    wait
    log "matrix: every lane done"
}

compare() {  # every cell's newest reported run, compared together (nothing is run again)
    env_up
    for study in pd-h200 pd-h200-decode-load; do
        local cells
        # only cells with a report: --reuse runs a cell that has none (a lane still running has none yet)
        cells=$(cd "$R/$study/cells" && for c in */; do ls "$c"*/report.json >/dev/null 2>&1 && echo "${c%/}"; done | paste -sd,)
        [ -n "$cells" ] || continue
        cmd python3 -m loadgen matrix "$R/scenario-files/$study.toml" --out "$R/$study" --reuse --cells "$cells" --quiet \
            >"$R/$study-compare.out" 2>&1
        log "compare $study: exit $?"
    done
}

collect() {
    tar_run --exclude='*.safetensors'
}

for stage in "$@"; do
    case $stage in
        stage-part0) stage_from .vllm "$KIT_DIR" ;;
        stage-nixl) stage_from .nixl /tmp/nixl-parts ;;
        stage-router) stage_from .pdw /tmp/pdw ;;
        install) install_pd ;;
        matrix | collect | compare | scenarios) $stage ;;
        start-matrix) detached benchmarks/vllm_pd_h200.sh matrix ;;
        wait-matrix) wait_for matrix "${WAIT_S:-540}" ;;
        *) echo "unknown stage $stage" >&2; exit 2 ;;
    esac
done
