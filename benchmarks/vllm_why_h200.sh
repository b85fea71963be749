#!/usr/bin/env bash
# Real vLLM 0.26 on one H200: why a canary's answer moves, and whether its rollouts match a re-score, measured by
# the tool itself (issue 52; results in docs/results/vllm-why-h200/, whose README says what each table shows).
#
# Why this script exists: it is the one command list behind those results. On the GPU machine vLLM comes from the
# offline kit, the model is the small trained code model (code-lm-30m; one cell serves the kit's seeded random
# Qwen3 for comparison with earlier results), and every engine is started by `loadgen matrix`, so the step-trace
# plugin (loadgen.plugins.vllm_steps, found through the `vllm.general_plugins` entry point written at install)
# writes each cell's engine trace into its run folder.
#
# A device call carries at most 64 MiB with the repository, so everything the machine lacks travels as one tar
# (the kit's two parts and sha256 file, Locust's wheels in whl/, the model's files in code-lm/) split into
# pieces of 60,000,000 bytes, one piece a call (with docs/results/, 28 MB of earlier results the machine does not
# need, moved out of the checkout for those calls and back after), made here with
#   tar -cf - -C .stage-src . | split -b 60000000 -d - .stage/stage.tar.part.
# Stages, one device call each unless said, back to back (the machine keeps /tmp only while held, ~30 s idle):
#   stage        copy the carried .stage/ piece into /tmp/stage (once per piece)
#   install      join the pieces, install the kit, Locust and the plugin's entry point, make the random model,
#                reassemble the code model (benchmarks/h200_common.sh's install)
#   cost         two `vllm serve` of the code model side by side, step trace on and off; trace_cost.py alternates
#                the same load between them (the plugin's cost, issue 52 item 1)
#   start-matrix the lanes below, detached (setsid) so that they outlive the call
#   start-core   the short form for a session with little device time: one lane each for why bi0/bi1,
#                why-decode bi0/bi1, the decode- and prefill-aimed phase cells, rl bi0/bi1 (or CORE_LANES), and
#                the plugin's cost beside them (`cost` under the other lanes' load, so the on/off pair shares it)
#   wait-matrix  waits up to WAIT_S seconds (default 540) for either form; name `collect` after it
#   compare      `loadgen matrix --reuse` per study (every reported cell compared together), then `collect`
#   collect      results.tar.gz (reports, traces, logs) and records.tar.gz (canary and re-score records)
#
# Studies (scenario files written under $R/scenario-files from benchmarks/vllm_why/*.toml):
#   why            prefill-heavy background: bi0, bi1, bi0-nochunk, bi1-nochunk, graphs (vLLM's defaults)
#   why-decode     decode-heavy background (8-32 words in, 200-400 tokens out): bi0, bi1
#   why-phase-*    the background aimed at one phase of the canary (prefill, decode, from:32), canary streamed: bi1
#   why-random     the kit's random Qwen3 instead of the code model: bi1
#   rl             seeded sampling at temperature 0.7 and 1.0, the four seed contracts: bi0, bi1
# Four lanes run side by side on the one GPU (each engine takes 8% of its memory); the re-score check runs in
# every why cell (rescore = true), alone and at each level.
#
# Usage: bash benchmarks/vllm_why_h200.sh STAGE [STAGE...]. Send a call's output to a file and print it after.
KIT=vllm
KIT_DIR=/tmp/vk
VERSIONS_PY='import sys, torch, vllm, transformers, locust
print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda)
print("vllm", vllm.__version__); print("transformers", transformers.__version__); print("locust", locust.__version__)'
RESULTS=${RESULTS:-/tmp/vllm-why-results}
# shellcheck source=benchmarks/h200_common.sh
. "$(dirname "${BASH_SOURCE[0]}")/h200_common.sh"  # OUT, R, MODEL, log, cmd, install, collect_results, detached, wait_for
env_up() {
    # shellcheck disable=SC1091
    . /tmp/bundle/env.sh
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
}
CODE_LM=/tmp/code-lm
WHY=benchmarks/vllm_why

stage() {
    mkdir -p /tmp/stage && cp .stage/* /tmp/stage/ && ls -la /tmp/stage
}

plugin_entry_point() {  # the plugin found by vLLM's loader: a dist-info beside the module path, as pip would write
    local d=/tmp/site/loadgen_vllm_steps-0.dist-info
    mkdir -p "$d"
    printf 'Metadata-Version: 2.1\nName: loadgen-vllm-steps\nVersion: 0\n' >"$d/METADATA"
    printf '[vllm.general_plugins]\nloadgen_steps = loadgen.plugins.vllm_steps:register\n' >"$d/entry_points.txt"
    python3 -c 'from importlib.metadata import entry_points
print("vllm.general_plugins:", [e.value for e in entry_points(group="vllm.general_plugins")])' | tee -a "$R/versions.txt"
}

install_why() {
    rm -rf /tmp/stage-x && mkdir -p /tmp/stage-x && cat /tmp/stage/stage.tar.part.* | tar -x -C /tmp/stage-x || exit 1
    mkdir -p ".$KIT" .whl && cp /tmp/stage-x/vllm-bundle.* ".$KIT/" && cp /tmp/stage-x/whl/*.whl .whl/
    install  # h200_common.sh: the kit, Locust's wheels, the random model at $MODEL, versions.txt
    mkdir -p "$CODE_LM" && cp /tmp/stage-x/code-lm/* "$CODE_LM/" &&
        (cd "$CODE_LM" && cat model.safetensors.part.* >model.safetensors && rm model.safetensors.part.* &&
            sha256sum -c model.sha256) || exit 1
    plugin_entry_point
}

start_vllm() {  # PORT NAME [VAR=VALUE...]: the code model, eager, BI 0, as the why cells serve it
    local port=$1 name=$2
    shift 2
    echo "env $* vllm serve $CODE_LM ... --port $port" >>"$R/commands.txt"
    env "$@" setsid vllm serve "$CODE_LM" --served-model-name code-lm --dtype bfloat16 --seed 0 --max-model-len 4096 \
        --generation-config vllm --attention-backend FLASH_ATTN --no-enable-prefix-caching \
        --max-num-batched-tokens 8192 --gpu-memory-utilization 0.08 --enforce-eager --host 127.0.0.1 \
        --port "$port" >"$R/vllm-$name.log" 2>&1 </dev/null &
}

cost() {
    env_up
    rm -rf /tmp/cost-trace && mkdir -p /tmp/cost-trace
    log "cost: trace on (8100) and off (8101)"
    start_vllm 8100 trace-on VLLM_BATCH_INVARIANT=0 LOADGEN_STEP_TRACE=/tmp/cost-trace
    start_vllm 8101 trace-off VLLM_BATCH_INVARIANT=0
    for port in 8100 8101; do
        for _ in $(seq 150); do curl -sf "127.0.0.1:$port/health" >/dev/null && break; sleep 2; done
        curl -sf "127.0.0.1:$port/health" >/dev/null && log "port $port healthy" || { log "port $port not healthy"; tail -30 "$R"/vllm-trace-*.log; }
    done
    cmd timeout 400 python3 "$WHY/trace_cost.py" --on http://127.0.0.1:8100 --off http://127.0.0.1:8101 \
        --trace /tmp/cost-trace --rounds 4 --requests 128 --out "$R/trace-cost.json" >"$R/trace-cost.out" 2>&1
    log "cost: exit $?"
    tail -20 "$R/trace-cost.out"
    mkdir -p "$R/trace-cost-sample" && head -c 20000 /tmp/cost-trace/*.jsonl >"$R/trace-cost-sample/head.txt"
    grep -h "loadgen_steps\|general_plugins\|plugin" "$R"/vllm-trace-*.log | head -20 >"$R/trace-cost-plugin-lines.txt"
    pkill -f -- "--port 810[01]( |\$)"  # these two only: the matrix lanes' engines may be running beside them
    sleep 5
}

scenarios() {  # each study's file under $R/scenario-files, from the two shipped ones
    local s=$R/scenario-files
    mkdir -p "$s"
    cp "$WHY/why.toml" "$s/why.toml"
    cp "$WHY/rl.toml" "$s/rl.toml"
    sed -e 's/^prompt_words = \[400, 900\]/prompt_words = [8, 32]/' -e 's/^max_tokens = \[1, 4\]/max_tokens = [200, 400]/' \
        -e 's/^name = "vllm-why"/name = "vllm-why-decode"/' "$WHY/why.toml" >"$s/why-decode.toml"
    local mode
    for mode in prefill decode from:32; do
        sed -e "s/^phase = \"all\"/phase = \"$mode\"/" -e 's/^stream = false  # canary/stream = true  # canary/' \
            -e 's/^rescore = true/rescore = false/' -e "s/^name = \"vllm-why\"/name = \"vllm-why-phase-${mode/:/}\"/" \
            "$WHY/why.toml" >"$s/why-phase-${mode/:/}.toml"
    done
    sed -e "s|^model = \"$CODE_LM\"|model = \"$MODEL\"|" -e 's/^name = "vllm-why"/name = "vllm-why-random"/' \
        "$WHY/why.toml" >"$s/why-random.toml"
    grep -H '^name = "vllm\|^phase\|^prompt_words\|^max_tokens\|^model\|^stream\|^rescore' "$s"/*.toml >"$R/scenario-lines.txt"
}

lane() {  # NAME STUDY:CELLS...: each share in turn, into $R/STUDY
    local name=$1 spec study cells
    shift
    for spec in "$@"; do
        study=${spec%%:*} cells=${spec#*:}
        log "lane $name: $study $cells"
        cmd timeout 1500 python3 -m loadgen matrix "$R/scenario-files/$study.toml" --cells "$cells" \
            --out "$R/$study" >>"$R/lane-$name.out" 2>&1
        log "lane $name: $study $cells exit $?"
    done
}

matrix() {
    env_up
    scenarios
    lane a why:bi1 why:bi0 why-phase-decode:bi1 &
    lane b why:bi1-nochunk why:bi0-nochunk why-phase-prefill:bi1 &
    lane c why-decode:bi1 why-decode:bi0 why-phase-from32:bi1 why-random:bi1 &
    lane d rl:bi1 rl:bi0 why:graphs &
    wait
    log "matrix: every lane done"
}

CORE_LANES=${CORE_LANES:-"why:bi1,why:bi0 why-decode:bi1,why-decode:bi0 why-phase-decode:bi1,why-phase-prefill:bi1 rl:bi1,rl:bi0"}
core() {  # the short form (see the stage list above); CORE_LANES: lanes apart by spaces, a lane's cells by commas
    env_up
    scenarios
    local spec n=0
    for spec in $CORE_LANES; do
        n=$((n + 1))
        # shellcheck disable=SC2046
        lane "core$n" $(tr , ' ' <<<"$spec") &
    done
    cost &
    wait
    log "matrix: every lane done"
}

compare() {  # every study's reported cells compared together (nothing is run again), and every cell in one table
    env_up
    local study cells all=()
    for study in why why-decode why-phase-prefill why-phase-decode why-phase-from32 why-random rl; do
        [ -d "$R/$study/cells" ] || continue
        cells=$(cd "$R/$study/cells" && for c in */; do ls "$c"*/report.json >/dev/null 2>&1 && echo "${c%/}"; done | paste -sd,)
        [ -n "$cells" ] || continue
        cmd python3 -m loadgen matrix "$R/scenario-files/$study.toml" --out "$R/$study" --reuse --cells "$cells" --quiet \
            >"$R/$study-compare.out" 2>&1
        log "compare $study: exit $?"
        [ "$study" = rl ] || all+=("$R/$study"/cells/*/*/)
    done
    # shellcheck disable=SC2068
    cmd python3 -m loadgen compare ${all[@]} --out "$R/all-why-cells" >"$R/all-why-cells.out" 2>&1
    log "compare all why cells: exit $?"
}

collect() {
    nvidia-smi >"$R/nvidia-smi-end.txt" 2>&1
    # engine traces are small (one line a step): kept in results, compressed by the tar
    tar -czf "$OUT/results.tar.gz" -C "$R" --exclude='canaries*.jsonl' --exclude='background*.jsonl' \
        --exclude='engine_metrics*.jsonl' --exclude='*.safetensors' --exclude='*.parquet' .
    # shellcheck disable=SC2046
    tar -czf "$OUT/records.tar.gz" -C "$R" $(cd "$R" && find . -name 'canaries*.jsonl' -o -name 'rescores*.jsonl' | sort)
    ls -la "$OUT"
}

for stage in "$@"; do
    case $stage in
        stage | cost | matrix | core | compare | collect | scenarios) $stage ;;
        install) install_why ;;
        start-matrix) detached benchmarks/vllm_why_h200.sh matrix ;;
        start-core) detached benchmarks/vllm_why_h200.sh core && mv "$R/core.pid" "$R/matrix.pid" ;;
        wait-matrix) wait_for matrix "${WAIT_S:-540}" ;;
        *) echo "unknown stage $stage" >&2; exit 2 ;;
    esac
done
