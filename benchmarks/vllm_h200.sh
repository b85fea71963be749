#!/usr/bin/env bash
# Real vLLM 0.26 on H200 GPUs, measured by the tool itself: default vs VLLM_BATCH_INVARIANT=1.
#
# Why this script exists: the tool's users run vLLM; this is the one command list that produces the
# figures in docs/results/vllm-h200/ (see its README for what each stage showed). It runs on the GPU
# machine, where vLLM comes from the offline kit (shared GPU kit README: two bundle parts, a seeded
# random Qwen3 made on the GPU), in stages that each fit one 10-minute device call:
#
#   install   unpack the kit, install Locust's wheels (carried in .whl), make the model
#   serve     two `vllm serve`: GPU 0 default (no --enable-prompt-tokens-details: cache hits are then
#             checked by vLLM's prefix-cache counters), GPU 1 VLLM_BATCH_INVARIANT=1 (with it); with one
#             GPU both on GPU 0, one after the other, 40% of its memory each (started one after another,
#             each one's memory profile sees only itself)
#   fixtures  capture what vLLM answers (/metrics, /server_info, completions, a prefix-cache reset idle
#             and under load) into $OUT/fixtures for the tests
#   runs      per mode, in parallel: benchmarks/vllm/sweep.toml (0..256 background), prefix-cache.toml,
#             tm-burst.toml (1,000 identical requests), each a real `loadgen run`
#   matrix    stop the servers; the D3 2x2 (benchmarks/vllm/d3-2x2.toml) through `loadgen matrix` with
#             the vLLM launcher, two cells per GPU in parallel (--cells, CUDA_VISIBLE_DEVICES); with one
#             GPU the two shares take turns on it (engines that boot side by side profile each other)
#   collect   `loadgen compare` of the four cells, results into $OUT/results.tar.gz
#
# Two GPUs or more (docs/results/vllm-h200-x2/):
#   tp        benchmarks/vllm/tp-x2.toml through `loadgen matrix`: tensor parallel 1 and 2 (and 2 with
#             NCCL's all-reduce), default and VLLM_BATCH_INVARIANT=1; start-tp / wait-tp detached,
#             collect-tp its results into $OUT/results.tar.gz
#
# The client at 512 streamed requests (one GPU is enough):
#   serve-default   one `vllm serve` on GPU 0, default settings (as in serve)
#   streams         benchmarks/vllm/stream-512.toml with one load process, then with --processes auto
#                   (PROCS to choose other counts, STREAMS_SCENARIO another file: stream-512-ab takes
#                   turns at level 512 alone, PROCS="0 auto 0"), each a real `loadgen run`
#   collect-streams those run folders (background rows left out) into $OUT/streams.tar.gz
#   (start-streams / wait-streams / stop-streams: detached, as the other start- stages)
# Send a call's output to a file and print the file after: piped into `tail`, a device call that ran
# `install serve-default start-streams` printed nothing and waited out its time limit.
#
# Usage: bash benchmarks/vllm_h200.sh STAGE [STAGE...]; `start-runs`/`start-matrix` run those stages
# detached (setsid) so that they outlive one device call, `wait-runs`/`wait-matrix` wait for them.
KIT=vllm
KIT_DIR=/tmp/vk
VERSIONS_PY='import sys, torch, vllm, transformers, locust
print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda)
print("vllm", vllm.__version__); print("transformers", transformers.__version__); print("locust", locust.__version__)'
# shellcheck source=benchmarks/h200_common.sh
. "$(dirname "${BASH_SOURCE[0]}")/h200_common.sh"  # OUT, R, MODEL, log, cmd, install, collect_results
env_up() {
    # shellcheck disable=SC1091
    . /tmp/bundle/env.sh
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
}
SERVE_ARGS=(--served-model-name tiny-qwen3 --dtype bfloat16 --seed 0 --max-model-len 4096 --generation-config vllm
    --attention-backend FLASH_ATTN --host 127.0.0.1)

start_vllm() {  # GPU PORT VLLM_BATCH_INVARIANT LOG_NAME [more `vllm serve` flags]: one server, in its own session
    local gpu=$1 port=$2 invariant=$3 name=$4 mem=${MEM_UTIL:-0.85}
    shift 4
    echo "CUDA_VISIBLE_DEVICES=$gpu VLLM_SERVER_DEV_MODE=1 VLLM_BATCH_INVARIANT=$invariant vllm serve $MODEL ${SERVE_ARGS[*]} --port $port --gpu-memory-utilization $mem${*:+ $*}" >>"$R/commands.txt"
    CUDA_VISIBLE_DEVICES=$gpu VLLM_SERVER_DEV_MODE=1 VLLM_BATCH_INVARIANT=$invariant setsid vllm serve "$MODEL" "${SERVE_ARGS[@]}" \
        --port "$port" --gpu-memory-utilization "$mem" "$@" >"$R/vllm-$name.log" 2>&1 < /dev/null &
}

wait_healthy() {  # PORT...
    for port in "$@"; do
        for _ in $(seq 150); do curl -sf "127.0.0.1:$port/health" >/dev/null && break; sleep 2; done
        curl -sf "127.0.0.1:$port/health" >/dev/null && log "port $port healthy" || { log "port $port not healthy"; tail -30 "$R"/vllm-*.log; }
    done
}

serve() {
    env_up
    local g2
    g2=$(second_gpu)
    log "serve: default on GPU 0 (port 8000), VLLM_BATCH_INVARIANT=1 on GPU $g2 (port 8001)"
    if [ "$g2" = 0 ]; then  # one GPU: one after the other, each with 40% of it
        MEM_UTIL=0.4 start_vllm 0 8000 0 default
        wait_healthy 8000
        MEM_UTIL=0.4 start_vllm 0 8001 1 invariant --enable-prompt-tokens-details
        wait_healthy 8001
        return
    fi
    start_vllm 0 8000 0 default
    start_vllm 1 8001 1 invariant --enable-prompt-tokens-details
    wait_healthy 8000 8001
}

serve_default() {
    env_up
    log "serve: default on GPU 0 (port 8000)"
    start_vllm 0 8000 0 default
    wait_healthy 8000
}

streams() {
    env_up
    local scenario=${STREAMS_SCENARIO:-stream-512}
    for procs in ${PROCS:-0 auto}; do  # a count may repeat: each run gets its own folder under processes-N
        log "streams: $scenario --processes $procs"
        cmd timeout 1200 python3 -m loadgen run "benchmarks/vllm/$scenario.toml" --host http://127.0.0.1:8000 \
            --out "$R/streams/processes-$procs" --processes "$procs" --label "processes=$procs" >>"$R/streams-$procs.out" 2>&1
        log "streams: --processes $procs exit $?"
    done
}

collect_streams() {
    tar -czf "$OUT/streams.tar.gz" -C "$R" --exclude='background*.jsonl' streams commands.txt timeline.txt \
        versions.txt $(cd "$R" && ls streams-*.out vllm-default.log 2>/dev/null)
    ls -la "$OUT"
}

fixtures() {
    local F=$OUT/fixtures
    mkdir -p "$F"
    log "fixtures"
    for port in ${PORTS:-8000 8001}; do
        local mode=default
        [ "$port" = 8001 ] && mode=invariant
        curl -s "127.0.0.1:$port/version" >"$F/$mode-version.json"
        curl -s "127.0.0.1:$port/v1/models" >"$F/$mode-models.json"
        curl -s "127.0.0.1:$port/server_info?config_format=json" >"$F/$mode-server_info.json"
        curl -s "127.0.0.1:$port/metrics" >"$F/$mode-metrics-idle.txt"
        curl -s "127.0.0.1:$port/v1/completions" -H 'content-type: application/json' -d \
            '{"model":"tiny-qwen3","prompt":"The old man climbed the green hill near the old town before the long night, and from the top he could see the river, so","max_tokens":8,"temperature":0,"logprobs":2,"return_token_ids":true}' \
            >"$F/$mode-completion.json"
        curl -sN "127.0.0.1:$port/v1/completions" -H 'content-type: application/json' -d \
            '{"model":"tiny-qwen3","prompt":"The old man climbed the green hill near the old town before the long night, and from the top he could see the river, so","max_tokens":4,"temperature":0,"logprobs":2,"stream":true,"stream_options":{"include_usage":true}}' \
            >"$F/$mode-completion-stream.txt"
        curl -s "127.0.0.1:$port/metrics" >"$F/$mode-metrics-after-hit.txt"
        curl -s -o /dev/null -w '%{http_code}\n' -XPOST "127.0.0.1:$port/reset_prefix_cache" >"$F/$mode-reset-idle.status"
        # a reset while requests run: what status does vLLM answer, and does the cache go?
        local busy=()
        for _ in $(seq 8); do
            curl -s "127.0.0.1:$port/v1/completions" -H 'content-type: application/json' -d \
                '{"model":"tiny-qwen3","prompt":"busy busy busy","max_tokens":1500,"temperature":0}' >/dev/null &
            busy+=($!)
        done
        sleep 1
        curl -s -o "$F/$mode-reset-busy.body" -w '%{http_code}\n' -XPOST "127.0.0.1:$port/reset_prefix_cache" >"$F/$mode-reset-busy.status"
        curl -s "127.0.0.1:$port/metrics" >"$F/$mode-metrics-busy.txt"
        wait "${busy[@]}"  # not a bare wait: the servers are this shell's children too
    done
    grep -h "reset prefix cache\|Resetting prefix cache" "$R"/vllm-*.log | head -20 >"$F/reset-log-lines.txt"
    ls -la "$F"
}

run_mode() {  # MODE PORT
    local mode=$1 port=$2
    for s in sweep prefix-cache tm-burst; do
        log "$mode: $s"
        cmd timeout 900 python3 -m loadgen run "benchmarks/vllm/$s.toml" --host "http://127.0.0.1:$port" \
            --out "$R/$mode/$s" --label "mode=$mode" >"$R/$mode-$s.out" 2>&1
        log "$mode: $s exit $?"
    done
}

runs() {
    env_up
    run_mode default 8000 &
    run_mode invariant 8001 &
    wait
}

d3_share() {  # GPU NAME CELLS: one share of the D3 2x2 on one GPU, into d3/NAME
    CUDA_VISIBLE_DEVICES=$1 cmd python3 -m loadgen matrix benchmarks/vllm/d3-2x2.toml --out "$R/d3/$2" \
        --cells "$3" >"$R/d3-$2.out" 2>&1
    log "$2 matrix exit $?"
}

matrix() {
    env_up
    local g2
    pkill -f "vllm serve" ; sleep 5
    g2=$(second_gpu)
    log "matrix: apc-on/off x invariant-0 on GPU 0, x invariant-1 on GPU $g2"
    if [ "$g2" = 0 ]; then  # one GPU: the shares take turns (share names as in the two-GPU results)
        d3_share 0 gpu0 apc-on_invariant-0,apc-off_invariant-0
        d3_share 0 gpu1 apc-on_invariant-1,apc-off_invariant-1
        return
    fi
    d3_share 0 gpu0 apc-on_invariant-0,apc-off_invariant-0 &
    d3_share 1 gpu1 apc-on_invariant-1,apc-off_invariant-1 &
    wait
}

collect() {
    env_up
    collect_results d3
}

tp() {  # tensor parallel 1 and 2 (benchmarks/vllm/tp-x2.toml), every cell started by the tool: two GPUs
    env_up
    local n
    n=$(gpu_count)
    [ "$n" -ge 2 ] || { log "tp: needs two GPUs, $n here"; return 1; }
    pkill -f "vllm serve" ; sleep 5
    log "tp: tensor parallel 1 and 2, default and VLLM_BATCH_INVARIANT=1"
    cmd timeout 3000 python3 -m loadgen matrix benchmarks/vllm/tp-x2.toml --out "$R/tp" >"$R/tp.out" 2>&1
    log "tp matrix exit $?"
}

detached() {  # STAGE: run it in its own session, so it outlives this device call
    # From a snapshot of the tree: a later device call copies the working tree over this one.
    local snap=/tmp/snapshot-$1
    rm -rf "$snap" && mkdir -p "$snap" && tar -c --exclude=./.vllm --exclude=./.whl . | tar -x -C "$snap"
    # The stage writes its own pid: $! would be setsid's, which may fork and exit at once.
    (cd "$snap" && setsid nohup bash -c 'echo $$ >"$1"; exec bash benchmarks/vllm_h200.sh "$2"' _ "$R/$1.pid" "$1" \
        >"$R/$1.detached.log" 2>&1 < /dev/null &)
    sleep 1
}

stop() {  # STAGE: end a detached stage and everything it started, by its session (setsid made one):
    # a process group would miss children that made their own, as `timeout` does
    pkill -TERM -s "$(cat "$R/$1.pid")"
    wait_for "$1" 60
}

wait_for() {  # STAGE SECONDS
    local pid
    pid=$(cat "$R/$1.pid")
    for _ in $(seq "$2"); do kill -0 "$pid" 2>/dev/null || { log "$1 done"; return 0; }; sleep 1; done
    log "$1 still running after $2 s"
}

for stage in "$@"; do
    case $stage in
        install | serve | fixtures | runs | matrix | collect | streams | tp) $stage ;;
        serve-default) serve_default ;;
        collect-streams) collect_streams ;;
        start-streams) detached streams ;;
        wait-streams) wait_for streams "${WAIT_S:-540}" ;;
        stop-streams) stop streams ;;
        start-runs) detached runs ;;
        start-matrix) detached matrix ;;
        start-tp) detached tp ;;
        wait-tp) wait_for tp "${WAIT_S:-540}" ;;
        collect-tp) env_up; collect_results tp ;;
        wait-runs) wait_for runs "${WAIT_S:-540}" ;;
        wait-matrix) wait_for matrix "${WAIT_S:-540}" ;;
        *) echo "unknown stage $stage" >&2; exit 2 ;;
    esac
done
