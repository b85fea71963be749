#!/usr/bin/env bash
# The whole tool on one H200 in one device call: GPU engine and Locust on the same machine.
#
# Why this script exists: issue 10 asks for the tool's figures on a real GPU engine, produced by
# one command whose every step is written down. Stages (each under its own time limit, so a slow
# stage still leaves the others' results):
#   1. benchmarks/gpu_invariance.py: canary alone vs among 3 others, bitwise, step time and tokens/s,
#      for the default and the batch-invariant mode of the GPU backend (in-process, no HTTP);
#   2. `loadgen run benchmarks/h200/sweep-h200.toml` against `loadgen serve --backend gpu`, 0..128 background users;
#   3. the Thinking Machines shape: 1,000 identical requests at once (benchmarks/h200/tm-burst-h200.toml);
#   4. `loadgen matrix benchmarks/h200/matrix-gpu.toml`: default vs batch-invariant, one sweep per cell.
# Everything lands in $RESULTS (default /tmp/h200) and is tarred to $OUT/results.tar.gz (reports, logs)
# and $OUT/records.tar.gz (the raw canary and background records).
#
# Usage on the device (wheels for Locust, orjson and pydantic carried in .whl, see shared/device-notes.md):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site:$PWD bash benchmarks/h200_run.sh
set -u
OUT=${OUT:-/tmp/out}
RESULTS=${RESULTS:-/tmp/h200}
PORT=${PORT:-8011}
SWEEP_S=${SWEEP_S:-140}
TM_S=${TM_S:-120}
MATRIX_S=${MATRIX_S:-170}
INV_S=${INV_S:-90}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1
CMDS="$RESULTS/commands.txt"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$RESULTS/timeline.txt"; }
cmd() { echo "$*" >>"$CMDS"; }

{
    date -u +"date: %Y-%m-%dT%H:%M:%SZ"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import sys, torch, transformers, locust, aiohttp, numpy
print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda)
print("transformers", transformers.__version__); print("locust", locust.__version__)
print("aiohttp", aiohttp.__version__); print("numpy", numpy.__version__)'
    nproc | sed 's/^/cpu cores /'
} >"$RESULTS/versions.txt" 2>&1
cat "$RESULTS/versions.txt"

log "stage 1: in-process determinism and throughput"
c="python3 benchmarks/gpu_invariance.py --canary-tokens 24 --levels 0 3 --reps 2 --sizes 1 4 16 --throughput-tokens 16 --out $RESULTS/gpu_invariance.json"
cmd "$c"
timeout -k 10 "$INV_S" $c >"$RESULTS/gpu_invariance.md" 2>"$RESULTS/gpu_invariance.err"
log "stage 1 rc=$?"

log "stage 2: default GPU server, sweep to 128"
c="python3 -m loadgen.engine --backend gpu --port $PORT --max-num-seqs 192 --max-model-len 1280 --max-num-batched-tokens 16384"
cmd "$c &"
$c >"$RESULTS/serve-default.log" 2>&1 &
SERVER=$!
for _ in $(seq 120); do grep -q READY "$RESULTS/serve-default.log" && break; sleep 1; done
log "server: $(grep READY "$RESULTS/serve-default.log")"
c="python3 -m loadgen run benchmarks/h200/sweep-h200.toml --host http://127.0.0.1:$PORT --label backend=gpu --label batch_invariant=0 --out $RESULTS/sweep"
cmd "$c"
timeout -k 20 -s TERM "$SWEEP_S" $c >"$RESULTS/sweep.log" 2>&1
log "stage 2 rc=$?"

log "stage 3: 1,000 identical requests at once"
c="python3 -m loadgen run benchmarks/h200/tm-burst-h200.toml --host http://127.0.0.1:$PORT --label backend=gpu --label batch_invariant=0 --out $RESULTS/tm-burst"
cmd "$c"
timeout -k 20 -s TERM "$TM_S" $c >"$RESULTS/tm-burst.log" 2>&1
log "stage 3 rc=$?"
kill "$SERVER" 2>/dev/null
wait "$SERVER" 2>/dev/null

log "stage 4: engine matrix default vs invariant"
c="python3 -m loadgen matrix benchmarks/h200/matrix-gpu.toml --out $RESULTS/matrix"
cmd "$c"
timeout -k 20 -s TERM "$MATRIX_S" $c >"$RESULTS/matrix.log" 2>&1
log "stage 4 rc=$?"

# reports for any run folder a timeout left without one
for m in "$RESULTS"/*/*/manifest.json "$RESULTS"/matrix/*/*/manifest.json; do
    d=$(dirname "$m")
    [ -f "$m" ] && [ ! -f "$d/report.json" ] && python3 -m loadgen report "$d" --quiet
done
# reports and logs in one archive; the raw records (large for the burst) in another
tar -czf "$OUT/results.tar.gz" --exclude='canaries*.jsonl' --exclude='background*.jsonl' -C "$RESULTS" .
(cd "$RESULTS" && find . -name 'canaries*.jsonl' -o -name 'background*.jsonl' | tar -czf "$OUT/records.tar.gz" -T -)
log "done: $(du -sh "$OUT"/*.tar.gz | tr '\n' ' ')"
