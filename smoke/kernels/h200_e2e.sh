#!/usr/bin/env bash
# End to end on one CUDA machine, all side by side in one run:
#   1. `onebit-build --recipe cuda build` (the patch series, so the row-tiled kernel is in);
#   2. the same build tree again with upstream's mmvq.cu (ninja rebuilds that one object and
#      relinks), copied aside as the unpatched build: the two differ only in mmvq.cu;
#   3. the kernel checker and the MUL_MAT timing against the two library sets;
#   4. greedy decoding of 1..8 sequences in lockstep (greedy_batch.cpp) with both builds,
#      compared token for token and by a hash of every logits row;
#   5. llama-batched-bench, 128 + 128 tokens, 1..8 sequences, builds interleaved per round;
#   6. per-kernel times under Nsight Compute (quantization vs mat-vec) at 8 columns.
#
# usage: smoke/kernels/h200_e2e.sh MIRROR_DIR MODEL OUTDIR
#   MIRROR_DIR  passed to --mirror-dir: holds llama.cpp.git, a bare repository with the pin
#   MODEL       a Q4_0 GGUF; waited for up to MODEL_WAIT_S seconds (default 900) if not there yet
#   OUTDIR      receives e2e.log, manifest.json, check.md, perf.md, perf.json, greedy.md,
#               batched.md, batched.json, kernels.md and logs.tar.gz
# Environment: WORKDIR (default mktemp -d), JOBS (default nproc), SEED (checker seed),
# ROUNDS (batched-bench rounds, default 3), PYTHON (default python3), RECIPE (default cuda; another
# recipe only to try the script out on a machine without CUDA: steps 3-5 then run on the CPU or fail).
set -uo pipefail

MIRROR=$(cd "$1" && pwd)
MODEL=$2
OUT=$(mkdir -p "$3" && cd "$3" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
W=${WORKDIR:-$(mktemp -d)}
JOBS=${JOBS:-$(nproc)}
ROUNDS=${ROUNDS:-3}
PY=${PYTHON:-python3}
RECIPE=${RECIPE:-cuda}
PIN=$(awk '/^ *commit:/ {print $2; exit}' "$REPO/pins.yaml")
LOGS=$W/logs
WS=$W/ws
T0=$(date +%s)
mkdir -p "$LOGS"

log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/e2e.log"; }
die() { log "FAILED: $*"; exit 1; }
finish() {
    tar -C "$W" -czf "$OUT/logs.tar.gz" logs 2>/dev/null
    log "done"
}
trap finish EXIT

log "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); $(nproc) cpus"
log "pin: $PIN"

# 1. The recipe, through the tool.
log "onebit-build --recipe $RECIPE build"
( cd "$REPO" && time "$PY" -m onebit_build --recipe "$RECIPE" --workspace "$WS" --mirror-dir "$MIRROR" --offline \
    -j "$JOBS" build ) > "$LOGS/onebit-build.log" 2>&1 || { tail -40 "$LOGS/onebit-build.log"; die "onebit-build"; }
grep -E '^(fetch|patch|build|real) ' "$LOGS/onebit-build.log" | tee -a "$OUT/e2e.log"
cp "$WS/manifests/$RECIPE.json" "$OUT/manifest.json" || die "no manifest"
read -r BUILD SRC < <("$PY" -c '
import json, sys
m = json.load(open(sys.argv[1]))
print(m["components"][0]["build_dir"], m["sources"][0]["tree"])' "$OUT/manifest.json")
log "build dir $BUILD"
log "patches in the manifest: $("$PY" -c '
import json, sys
m = json.load(open(sys.argv[1]))
print(", ".join(p["name"] for s in m["sources"] for p in s["patches"]))' "$OUT/manifest.json")"
cp -a "$BUILD/bin" "$W/patched"

# 2. The unpatched build: upstream's mmvq.cu in the same tree, one object rebuilt.
MMVQ=ggml/src/ggml-cuda/mmvq.cu
cp "$SRC/$MMVQ" "$W/mmvq.patched.cu"
git -C "$SRC" show "$PIN:$MMVQ" > "$SRC/$MMVQ" || die "git show $PIN:$MMVQ"
( time cmake --build "$BUILD" --target llama-server llama-batched-bench -j "$JOBS" ) > "$LOGS/unpatched-build.log" 2>&1 \
    || { tail -40 "$LOGS/unpatched-build.log"; die "unpatched rebuild"; }
grep -E 'Building|Linking|^real' "$LOGS/unpatched-build.log" | tee -a "$OUT/e2e.log"
cp -a "$BUILD/bin" "$W/unpatched"
# The source tree back as the tool left it (its build dir keeps the unpatched object; the
# workspace under WORKDIR is only for this run).
cp "$W/mmvq.patched.cu" "$SRC/$MMVQ"
for b in unpatched patched; do
    log "$b libggml-cuda: $(sha256sum "$W/$b"/libggml-cuda.so.*.* | cut -c1-16), row-tiled host symbols: $(nm -C "$W/$b"/libggml-cuda.so.*.* | grep -c 'mul_mat_vec_q4_0_q8_1_rt<')"
done

# 3. Kernel checker and timing against the two library sets.
g++ -O2 -std=c++17 "$HERE/mmvq_harness.cpp" -I"$SRC/ggml/include" -L"$W/patched" -Wl,-rpath-link,"$W/patched" \
    -lggml -lggml-base -ldl -o "$W/mmvq_harness" > "$LOGS/harness.log" 2>&1 || { cat "$LOGS/harness.log"; die "harness"; }
SEED_ARG=()
[ -n "${SEED:-}" ] && SEED_ARG=(--seed "$SEED")
export PYTHONUNBUFFERED=1
log "check"
"$PY" "$HERE/check_mmvq_q4_0.py" --harness "$W/mmvq_harness" --build "unpatched=$W/unpatched" --build "patched=$W/patched" \
    --workdir "$W" --table "$OUT/check.md" "${SEED_ARG[@]}" > "$LOGS/check.log" 2>&1
log "check exit $?: $(tail -1 "$LOGS/check.log")"
"$PY" "$HERE/copy_bandwidth.py" 2 20 > "$LOGS/bandwidth.log" 2>&1
BW=$(awk '/^bandwidth_gbs/ {print $2}' "$LOGS/bandwidth.log")
log "copy bandwidth: ${BW:-unknown} GB/s"
BW_ARG=()
[ -n "$BW" ] && BW_ARG=(--bandwidth-gbs "$BW")
log "perf"
"$PY" "$HERE/perf_mmvq_q4_0.py" --harness "$W/mmvq_harness" --build "unpatched=$W/unpatched" --build "patched=$W/patched" \
    --rounds 3 --reps 50 "${BW_ARG[@]}" --json "$OUT/perf.json" --table "$OUT/perf.md" > "$LOGS/perf.log" 2>&1
log "perf exit $?"

# 4. and 5. need the model.
for _ in $(seq "${MODEL_WAIT_S:-900}"); do
    [ -f "$MODEL" ] && break
    sleep 1
done
[ -f "$MODEL" ] || die "no model at $MODEL"
log "model $(sha256sum "$MODEL" | cut -c1-16) $(stat -c %s "$MODEL") bytes"

g++ -O2 -std=c++17 "$HERE/greedy_batch.cpp" -I"$SRC/include" -I"$SRC/ggml/include" -L"$W/patched" \
    -Wl,-rpath-link,"$W/patched" -Wl,-rpath,'$ORIGIN' -lllama -lggml -lggml-base -o "$W/greedy_batch" \
    > "$LOGS/greedy-build.log" 2>&1 || { cat "$LOGS/greedy-build.log"; die "greedy_batch"; }
for b in unpatched patched; do cp "$W/greedy_batch" "$W/$b/"; done
log "greedy"
for n in 1 2 3 4 5 6 7 8; do
    for b in unpatched patched; do
        "$W/$b/greedy_batch" "$MODEL" "$HERE/greedy_prompts.txt" "$n" 128 "$W/greedy-$b-$n.jsonl" 99 \
            > "$LOGS/greedy-$b-$n.log" 2>&1 || log "greedy $b n=$n exit $?"
    done
done

log "batched-bench, $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
    for b in unpatched patched; do
        "$W/$b/llama-batched-bench" -m "$MODEL" -ngl 99 -c 4096 -b 2048 -ub 512 -npp 128 -ntg 128 \
            -npl 1,2,3,4,5,6,7,8 --output-format jsonl > "$W/batched-$b-$r.jsonl" 2> "$LOGS/batched-$b-$r.log" \
            || log "batched-bench $b round $r exit $?"
    done
done

"$PY" "$HERE/e2e_tables.py" --workdir "$W" --rounds "$ROUNDS" --greedy "$OUT/greedy.md" \
    --batched "$OUT/batched.md" --json "$OUT/batched.json" 2>&1 | tee -a "$OUT/e2e.log"
log "tables exit ${PIPESTATUS[0]} (1: a greedy output differs or is missing)"
cp "$W"/greedy-*.jsonl "$LOGS/" 2>/dev/null

# 6. Where the time of one MUL_MAT goes: quantization kernel vs mat-vec kernel, per build.
log "kernel times (ncu)"
timeout 300 "$PY" "$HERE/kernel_times.py" --harness "$W/mmvq_harness" --build "unpatched=$W/unpatched" \
    --build "patched=$W/patched" --ns 8 --table "$OUT/kernels.md" > "$LOGS/kernels.log" 2>&1
log "kernel times exit $?"
