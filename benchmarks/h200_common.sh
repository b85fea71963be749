# shellcheck shell=bash
# The part the real-engine GPU scripts share (benchmarks/vllm_h200.sh, benchmarks/sglang_h200.sh):
# output folders, the timeline and command logs, the kit's install and the run's tar files.
#
# Why a file of its own: both scripts run on the GPU machine from the same offline-kit layout (bundle
# parts in .KIT/, Locust's wheels in .whl/, a seeded random Qwen3 made at /tmp/model) and must write
# their results the same way; one copy keeps them from drifting apart. Sourced, never run: it starts
# nothing. The sourcing script sets KIT (vllm or sglang), KIT_DIR (where the bundle is unpacked) and
# VERSIONS_PY (the Python that prints its engine's versions) first, and defines env_up (the kit's
# environment and PYTHONPATH, whose order differs per engine) before it calls install.
set -u
OUT=${OUT:-/tmp/out}
R=${RESULTS:-/tmp/$KIT-results}
MODEL=/tmp/model
export PYTHONUNBUFFERED=1
# NVLink multicast stays off in every process started here (the GPU machines' rule: a program that uses it
# can take the host's shared GPUs out of service); the engines inherit this environment.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$R" "$OUT"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$R/timeline.txt"; }
gpu_count() { nvidia-smi -L 2>/dev/null | grep -c '^GPU'; }
# Where the second mode goes: GPU 1 where two or more are lent, else GPU 0, which the two modes then share
# (each script says how: memory halves for long-lived servers, turns for engines a matrix cold-boots).
second_gpu() { if [ "$(gpu_count)" -ge 2 ]; then echo 1; else echo 0; fi; }
cmd() { echo "$*" >>"$R/commands.txt"; "$@"; }

install() {
    log "install"
    mkdir -p "$KIT_DIR" && cp ".$KIT/$KIT-bundle".* "$KIT_DIR/" && (cd "$KIT_DIR" && sha256sum -c "$KIT-bundle.sha256") &&
        cat "$KIT_DIR/$KIT-bundle".part.* | tar -x -C /tmp && bash /tmp/bundle/install.sh || exit 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    env_up
    cmd python3 /tmp/bundle/make_model.py "$MODEL" 32768 2048 16 16 8
    cmd python3 /tmp/bundle/mkweights.py "$MODEL"
    {
        date -u +"date: %Y-%m-%dT%H:%M:%SZ"
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
        python3 -c "$VERSIONS_PY"
        nproc | sed 's/^/cpu cores /'
    } >"$R/versions.txt" 2>&1
    cat "$R/versions.txt"
}

collect_results() {  # MATRIX [more tar options]: compare the cells under $R/MATRIX, then tar results and records
    local matrix=$1 cells
    shift
    cells=$(ls -d "$R/$matrix"/*/cells/*/*/ 2>/dev/null)  # every share's cells (matrix/<share>/cells/...)
    # shellcheck disable=SC2086
    [ -n "$cells" ] && cmd python3 -m loadgen compare $cells --out "$R/$matrix/comparison" >"$R/$matrix-compare.out" 2>&1
    tar -czf "$OUT/results.tar.gz" -C "$R" --exclude='canaries*.jsonl' --exclude='background*.jsonl' \
        --exclude='engine_metrics*.jsonl' "$@" .
    # shellcheck disable=SC2046
    tar -czf "$OUT/records.tar.gz" -C "$R" $(cd "$R" && find . -name '*.jsonl' | sort)
    ls -la "$OUT"
}

tar_run() {  # [more tar options]: $R into $OUT, results.tar.gz (all but the records) and records.tar.gz (canary and
    # /metrics records), with nvidia-smi's last word
    nvidia-smi >"$R/nvidia-smi-end.txt" 2>&1
    tar -czf "$OUT/results.tar.gz" -C "$R" --exclude='canaries*.jsonl' --exclude='background*.jsonl' \
        --exclude='engine_metrics*.jsonl' "$@" .
    # shellcheck disable=SC2046
    tar -czf "$OUT/records.tar.gz" -C "$R" $(cd "$R" && find . -name 'canaries*.jsonl' -o -name 'engine_metrics*.jsonl' | sort)
    ls -la "$OUT"
}

detached() {  # SCRIPT STAGE: run SCRIPT's STAGE in its own session, from a snapshot of the tree (a later call copies
    # over the tree; the carried kit folders, dot-named, stay out of the snapshot)
    local snap=/tmp/snapshot-$2
    rm -rf "$snap" && mkdir -p "$snap" && tar -c --exclude='./.[a-z]*' . | tar -x -C "$snap"
    (cd "$snap" && setsid nohup bash -c 'echo $$ >"$1"; exec bash "$2" "$3"' _ "$R/$2.pid" "$1" "$2" \
        >"$R/$2.detached.log" 2>&1 </dev/null &)
    sleep 1
}

wait_for() {  # STAGE SECONDS: until the detached STAGE ends, printing the timeline now and then
    local pid
    pid=$(cat "$R/$1.pid")
    for i in $(seq "$2"); do
        kill -0 "$pid" 2>/dev/null || { log "$1 done"; return 0; }
        [ $((i % 60)) = 0 ] && tail -4 "$R/timeline.txt"
        sleep 1
    done
    log "$1 still running after $2 s"
}
