#!/usr/bin/env bash
# Real SGLang 0.5.15 on H200 GPUs, measured by the tool itself: default vs --enable-deterministic-inference.
#
# Why this script exists: SGLang is the second engine the tool's users run; this is the one command list that
# produces the figures in docs/results/sglang-h200/. It runs on the GPU machine, where SGLang comes from the
# offline kit (shared GPU kit README: one bundle part, a seeded random Qwen3 made on the GPU), in stages that
# each fit one 10-minute device call, or all in one detached chain whose timeline later calls read (as run for
# docs/results/sglang-h200: the tree copied to /tmp/repo first, so a later call's tree never reaches a running
# stage):
#
#   cp -a . /tmp/repo && cd /tmp/repo && OUT=/tmp/out setsid bash benchmarks/sglang_h200.sh install serve \
#       fixtures runs own collect matrix collect fresh collect >/tmp/master.log 2>&1 </dev/null &
#
#   install   unpack the kit, install Locust's wheels (carried in .whl), make the model
#   serve     two SGLang servers: GPU 0 default (port 30000), GPU 1 --enable-deterministic-inference (30001);
#             with one GPU both on GPU 0, one after the other, each with the same fixed KV pool
#             (--max-total-tokens): SGLang sizes its pool from the memory free when it starts, so the second
#             server's --mem-fraction-static must also cover the first's (kernels do not depend on the pool)
#             Each logs every finished request as JSON (--log-requests, level 1) into $R/reqlog-<mode>/: SGLang's
#             own per-request timestamps (received, first response sent, finished), the independent record
#             that says which co-residency witness is right (the load side's held count or /metrics' gauge)
#   fixtures  capture what SGLang answers (benchmarks/sglang/capture.py) into $R/fixtures/<mode>
#   runs      per mode, in parallel: benchmarks/sglang/sweep.toml (0..256 background) and prefix-cache.toml,
#             each a real `loadgen run` through SGLang's native /generate (endpoint kind "generate")
#   own       per mode, in parallel: SGLang's own determinism test (sglang.test.test_deterministic, --test-mode
#             single over batches of 1..32 and prefix over 1..16) on the same server, then this tool's comparable
#             scenarios (benchmarks/sglang/own-single.toml, own-prefix.toml), into $R/own/
#   matrix    stop the servers; benchmarks/sglang/matrix.toml through `loadgen matrix` with the sglang
#             launcher, two cells per GPU in parallel (--cells, CUDA_VISIBLE_DEVICES); with one GPU the two
#             shares take turns on it (engines that boot side by side would size their pools from each
#             other's memory)
#   fresh     the default server again, its gauge refreshed every decode step (--decode-log-interval 1; SGLang's
#             default updates it every 40 steps and at each prefill), and the sweep to level 16 through it, into
#             $R/fresh: the same witness, fresh
#   collect   results into $OUT/results.tar.gz (records in $OUT/records.tar.gz)
#
# ONLY_MODE=default (or deterministic): that mode's server alone (serve, fixtures, and every stage that runs on
# both); OWN_TESTS="prefix": `own` runs that mode of SGLang's test and its own- scenario only. Together they fit
# install, serve, fixtures, own and collect in one 10-minute device call (about 4 minutes), so a machine lost
# between calls loses nothing.
#
# Usage: bash benchmarks/sglang_h200.sh STAGE [STAGE...]
KIT=sglang
KIT_DIR=/tmp/sg
VERSIONS_PY='import sys, importlib.metadata as m
print("python", sys.version.split()[0])
for p in ("sglang", "sglang-kernel", "flashinfer-python", "torch", "transformers", "locust"): print(p, m.version(p))'
# shellcheck source=benchmarks/h200_common.sh
. "$(dirname "${BASH_SOURCE[0]}")/h200_common.sh"  # OUT, R, MODEL, log, cmd, install, collect_results
env_up() {
    # shellcheck disable=SC1091
    . /tmp/bundle/env.sh
    export PYTHONPATH="$PYTHONPATH:/tmp/site:$PWD"
}
SERVE_ARGS=(--model-path "$MODEL" --served-model-name tiny-qwen3 --attention-backend triton --grammar-backend none
    --enable-metrics --enable-cache-report --cuda-graph-max-bs-decode 8 --host 127.0.0.1)
SHARED_KV=(--max-total-tokens 262144)  # one GPU, two servers: 262,144 tokens of KV each (16 GiB for this model)

serve_one() {  # MODE GPU PORT FLAGS...
    local mode=$1 gpu=$2 port=$3
    shift 3
    set -- "$@" --log-requests --log-requests-level 1 --log-requests-format json --log-requests-target "$R/reqlog-$mode"
    mkdir -p "$R/reqlog-$mode"
    echo "CUDA_VISIBLE_DEVICES=$gpu python3 -m sglang.launch_server ${SERVE_ARGS[*]} --port $port $*" >>"$R/commands.txt"
    # started from a subshell: not a child of this shell, so no `wait` here ever waits for a server
    (CUDA_VISIBLE_DEVICES=$gpu setsid python3 -m sglang.launch_server "${SERVE_ARGS[@]}" --port "$port" "$@" \
        >"$R/sglang-$mode.log" 2>&1 </dev/null &)
}

healthy() {  # PORT: wait until /health answers 200
    for _ in $(seq 300); do
        python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$1/health', timeout=2)" \
            2>/dev/null && { log "port $1 healthy"; return 0; }
        sleep 1
    done
    log "port $1 not healthy after 300 s"; return 1
}

port_of() {  # MODE: the port of that mode's long-lived server
    case $1 in default) echo 30000 ;; deterministic) echo 30001 ;; esac
}

serve_mode() {  # MODE GPU MEM_FRACTION [FLAGS...]: that mode's server, on its port
    local mode=$1 gpu=$2 fraction=$3 flags
    shift 3
    case $mode in default) flags=(--sampling-backend pytorch) ;; deterministic) flags=(--enable-deterministic-inference) ;; esac
    serve_one "$mode" "$gpu" "$(port_of "$mode")" "${flags[@]}" --mem-fraction-static "$fraction" "$@"
}

serve() {
    env_up
    local g2 a b
    if [ -n "${ONLY_MODE:-}" ]; then  # one mode alone: its server on GPU 0, the one-GPU share
        log "serve: $ONLY_MODE alone on GPU 0 (port $(port_of "$ONLY_MODE"))"
        serve_mode "$ONLY_MODE" 0 0.35 "${SHARED_KV[@]}"
        healthy "$(port_of "$ONLY_MODE")"
        return
    fi
    g2=$(second_gpu)
    log "serve: default on GPU 0 (port 30000), --enable-deterministic-inference on GPU $g2 (port 30001)"
    if [ "$g2" = 0 ]; then  # one GPU: the first takes 35% of it, the second its own 35% on top of that
        serve_mode default 0 0.35 "${SHARED_KV[@]}"
        healthy 30000 || return 1
        serve_mode deterministic 0 0.75 "${SHARED_KV[@]}"
        healthy 30001
        return
    fi
    serve_mode default 0 0.5
    serve_mode deterministic 1 0.5
    healthy 30000 & a=$!
    healthy 30001 & b=$!
    wait "$a" "$b"
}

fixtures() {
    env_up
    local mode
    log "fixtures"
    for mode in ${ONLY_MODE:-default deterministic}; do
        cmd python3 benchmarks/sglang/capture.py "http://127.0.0.1:$(port_of "$mode")" "$R/fixtures/$mode"
    done
}

scenarios() {  # MODE PORT OUTDIR SCENARIO...: each a real `loadgen run` against the MODE server, into OUTDIR/MODE
    local mode=$1 port=$2 out=$3 s
    shift 3
    for s in "$@"; do
        log "$mode: $s"
        cmd timeout "${RUN_S:-400}" python3 -m loadgen run "benchmarks/sglang/$s.toml" --host "http://127.0.0.1:$port" \
            --out "$out/$mode" --label engine=sglang --label "mode=$mode" >"$out/$mode-$s.out" 2>&1
        log "$mode: $s exit $?"
    done
}

both_modes() {  # FUNCTION: FUNCTION MODE PORT for the two long-lived servers, in parallel
    env_up
    local a b
    if [ -n "${ONLY_MODE:-}" ]; then "$1" "$ONLY_MODE" "$(port_of "$ONLY_MODE")"; return; fi
    "$1" default 30000 & a=$!
    "$1" deterministic 30001 & b=$!
    wait "$a" "$b"
}

run_mode() { scenarios "$1" "$2" "$R" sweep prefix-cache; }

runs() { both_modes run_mode; }

own_mode() {  # MODE PORT: SGLang's own determinism test, then this tool's comparable scenarios, on one server
    local mode=$1 port=$2 t
    mkdir -p "$R/own"
    for t in "single --n-trials 32" "prefix --n-start 1 --n-trials 16"; do
        [[ " ${OWN_TESTS:-single prefix} " == *" ${t%% *} "* ]] || continue
        log "$mode: sglang.test.test_deterministic --test-mode $t"
        # shellcheck disable=SC2086
        cmd timeout 300 python3 -m sglang.test.test_deterministic --host 127.0.0.1 --port "$port" --test-mode $t \
            >"$R/own/$mode-test-${t%% *}.txt" 2>&1
        log "$mode: test_deterministic ${t%% *} exit $?: $(grep -c 'Unique samples' "$R/own/$mode-test-${t%% *}.txt") summary lines"
    done
    # shellcheck disable=SC2046
    scenarios "$mode" "$port" "$R/own" $(for t in ${OWN_TESTS:-single prefix}; do echo "own-$t"; done)
}

own() { both_modes own_mode; }

fresh() {  # the default server with its running gauge refreshed every decode step, and the sweep to 16 through it
    env_up
    local p
    for p in $(pgrep -f "sglang.launch_server"); do kill "$p"; done
    sleep 5
    serve_one fresh 0 30002 --sampling-backend pytorch --mem-fraction-static 0.35 "${SHARED_KV[@]}" --decode-log-interval 1
    healthy 30002 || return 1
    log "fresh: sweep to 16, gauge every decode step"
    cmd timeout "${RUN_S:-400}" python3 -m loadgen run benchmarks/sglang/sweep.toml --host http://127.0.0.1:30002 \
        --levels 0,1,3,7,16 --out "$R/fresh" --label engine=sglang --label mode=default --label decode_log_interval=1 \
        >"$R/fresh-sweep.out" 2>&1
    log "fresh: sweep exit $?"
    for p in $(pgrep -f "sglang.launch_server"); do kill "$p"; done
}

matrix_share() {  # GPU NAME CELLS: one share of the matrix on one GPU, into matrix/NAME
    CUDA_VISIBLE_DEVICES=$1 cmd python3 -m loadgen matrix benchmarks/sglang/matrix.toml --out "$R/matrix/$2" \
        --cells "$3" >"$R/matrix-$2.out" 2>&1
    log "$2 matrix exit $?"
}

matrix() {
    env_up
    local p g2
    for p in $(pgrep -f "sglang.launch_server"); do kill "$p"; done
    sleep 5
    g2=$(second_gpu)
    log "matrix: default cells on GPU 0, deterministic cells on GPU $g2"
    if [ "$g2" = 0 ]; then  # one GPU: the shares take turns
        matrix_share 0 default det-off_radix-on,det-off_radix-off
        matrix_share 0 deterministic det-on_radix-on,det-on_radix-off
        return
    fi
    matrix_share 0 default det-off_radix-on,det-off_radix-off &
    matrix_share 1 deterministic det-on_radix-on,det-on_radix-off &
    wait
}

collect() {
    env_up
    for f in "$R"/sglang-*.log; do [ -f "$f" ] && gzip -kf "$f"; done
    collect_results matrix --exclude='sglang-*.log'
    log "collect done"
}

case ${ONLY_MODE:-} in
    "" | default | deterministic) ;;
    *) echo "ONLY_MODE: default or deterministic (or unset for both), not $ONLY_MODE" >&2; exit 2 ;;
esac
for stage in "$@"; do
    case $stage in
        install | serve | fixtures | own | runs | matrix | fresh | collect) $stage ;;
        *) echo "unknown stage $stage" >&2; exit 2 ;;
    esac
done
