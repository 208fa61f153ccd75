#!/usr/bin/env bash
# End to end on one CUDA machine, all side by side in one run:
#   1. `onebit-build --recipe cuda build` (the patch series, so the row-tiled kernels are in); while it
#      builds: a random-weight llama GGUF is written (make_random_llama.py) and, from the exported
#      compile command of mmvq.cu, three more objects are compiled: upstream's mmvq.cu (the unpatched
#      twin), the patched file with known-bad.patch (a deliberately wrong kernel), and the patched file
#      again with -Xptxas -v (spill counts for the resource audit);
#   2. libggml-cuda relinked with each of the two other objects; the recipe's bin/ copied three times,
#      differing only in that library;
#   3. checker: unpatched vs patched on every case group (exit 0 expected), unpatched vs known-bad
#      (exit 1 expected: the proof that the checker catches a wrong kernel);
#   4. resource audit of the shipped kernels from the patched library's cubins;
#   5. greedy decoding of 1..8 sequences in lockstep (greedy_batch.cpp) with both builds, compared
#      token for token and by a hash of every logits row; llama-batched-bench, 1..8 sequences,
#      ROUNDS rounds, builds alternating (order swapped every round);
#   6. copy bandwidth and the MUL_MAT timing of both builds (perf_mmvq_q4_0.py).
# Everything lands in OUTDIR; OUTDIR/DONE is written last.
#
# usage: kernels/row-tiled-q4_0/tools/h200_e2e.sh MIRROR_DIR OUTDIR
#   MIRROR_DIR  passed to --mirror-dir: holds llama.cpp.git, a bare repository with the pin
# Environment: WORKDIR (default mktemp -d), TOOL_ROOT (project root for onebit-build, default this
# checkout), JOBS (default nproc), PYTHON (default python3), SEED (checker seed, default random),
# ROUNDS (batched-bench rounds, default 4), LAYERS (model layers, default 8), PERF_SHAPES,
# PERF_ROUNDS (default 3), PERF_REPS (default 25).
set -uo pipefail

MIRROR=$(cd "$1" && pwd)
OUT=$(mkdir -p "$2" && cd "$2" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
TOOL_ROOT=$(cd "${TOOL_ROOT:-$REPO}" && pwd)
W=${WORKDIR:-$(mktemp -d)}
JOBS=${JOBS:-$(nproc)}
PY=${PYTHON:-python3}
ROUNDS=${ROUNDS:-4}
LAYERS=${LAYERS:-8}
PERF_SHAPES=${PERF_SHAPES:-4096x4096,4096x11008,4096x14336,5120x17408,14336x4096,17408x5120,4099x4096}
PERF_ROUNDS=${PERF_ROUNDS:-3}
PERF_REPS=${PERF_REPS:-25}
PIN=$(awk '/^ *commit:/ {print $2; exit}' "$TOOL_ROOT/pins.yaml")
LOGS=$W/logs
WS=$W/ws
VAR=$W/var
T0=$(date +%s)
mkdir -p "$LOGS" "$VAR"
rm -f "$OUT/DONE"

log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/e2e.log"; }
finish() {
    tar -C "$W" -czf "$OUT/logs.tar.gz" logs 2>/dev/null
    log "done"
    touch "$OUT/DONE"
}
trap finish EXIT

{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv
    nvcc --version | tail -2
    echo "cpus: $(nproc)"; uname -r
} > "$OUT/machine.txt" 2>&1
log "machine: $(sed -n 2p "$OUT/machine.txt"); $(nproc) cpus; pin $PIN"

# 1. The recipe, through the tool, in the background.
log "onebit-build --recipe cuda build"
( cd "$TOOL_ROOT" && time "$PY" -m onebit_build --root "$TOOL_ROOT" --recipe cuda --workspace "$WS" \
    --mirror-dir "$MIRROR" --offline -j "$JOBS" build ) > "$LOGS/onebit-build.log" 2>&1 &
BUILD_PID=$!

# The source tree appears first: write the model from its gguf-py meanwhile.
for _ in $(seq 600); do
    SRC=$(ls -d "$WS"/src/llama.cpp-*/ 2>/dev/null | head -1)
    [ -n "$SRC" ] && [ -f "$SRC/ggml/src/ggml-cuda/mmvq.cu" ] && [ -d "$SRC/gguf-py" ] && break
    kill -0 "$BUILD_PID" 2>/dev/null || break
    sleep 1
done
SRC=${SRC%/}
[ -n "$SRC" ] || { tail -30 "$LOGS/onebit-build.log"; log "FAILED: no source tree"; exit 1; }
log "source tree ready"
( PYTHONPATH="$SRC/gguf-py${PYTHONPATH:+:$PYTHONPATH}" "$PY" "$HERE/make_random_llama.py" "$W/model.gguf" --layers "$LAYERS" ) \
    > "$LOGS/model.log" 2>&1 &
MODEL_PID=$!

# The compile command of mmvq.cu, once CMake has written build.ninja: the variant objects.
for _ in $(seq 900); do
    BD=$(ls -d "$WS"/build/cuda-llama-*/ 2>/dev/null | head -1)
    [ -n "$BD" ] && [ -f "$BD/build.ninja" ] && break
    kill -0 "$BUILD_PID" 2>/dev/null || break
    sleep 1
done
BD=${BD%/}
[ -f "$BD/build.ninja" ] || { tail -30 "$LOGS/onebit-build.log"; log "FAILED: no build.ninja"; exit 1; }
git -C "$SRC" show "$PIN:ggml/src/ggml-cuda/mmvq.cu" > "$VAR/mmvq-unpatched.cu" || { log "FAILED: git show $PIN:mmvq.cu"; exit 1; }
cp "$SRC/ggml/src/ggml-cuda/mmvq.cu" "$VAR/mmvq-patched.cu"
( mkdir -p "$VAR/kb/ggml/src/ggml-cuda" && cp "$VAR/mmvq-patched.cu" "$VAR/kb/ggml/src/ggml-cuda/mmvq.cu" \
  && cd "$VAR/kb" && patch -s -p1 < "$HERE/known-bad.patch" && cp ggml/src/ggml-cuda/mmvq.cu "$VAR/mmvq-knownbad.cu" ) \
    || { log "FAILED: known-bad.patch"; exit 1; }
"$PY" - "$BD" "$SRC/ggml/src/ggml-cuda" "$VAR" <<'PY' || { log "FAILED: compile commands"; exit 1; }
import re, shlex, subprocess, sys
build, cudadir, var = sys.argv[1:]
cmds = subprocess.run(["ninja", "-C", build, "-t", "commands", "ggml-cuda"], capture_output=True, text=True, check=True).stdout.splitlines()
cc = next(c for c in cmds if re.search(r"\s-c\s+\S*ggml-cuda/mmvq\.cu(\s|$)", c))
src = re.search(r"\s-c\s+(\S*ggml-cuda/mmvq\.cu)", cc).group(1)
obj = re.search(r"\s-o\s+(\S+)", cc).group(1)
cc = re.sub(r"\s-MD\s+-MT\s+\S+\s+-MF\s+\S+", " ", cc)
open(f"{var}/object-path", "w").write(obj + "\n")
for v, extra in (("unpatched", ""), ("knownbad", ""), ("audit", " -Xptxas -v")):
    c = cc.replace(src, f"{var}/mmvq-{v if v != 'audit' else 'patched'}.cu").replace(f" -o {obj}", f" -o {var}/mmvq-{v}.o")
    open(f"{var}/compile-{v}.sh", "w").write(f"cd {shlex.quote(build)} && {c} -I{cudadir}{extra}\n")
link = next(c for c in cmds if "-soname,libggml-cuda.so" in c)
if obj not in link:
    sys.exit("the link command of libggml-cuda does not name mmvq.cu.o (response file?)")
for v in ("unpatched", "knownbad"):
    lk = re.sub(r"-o\s+\S*libggml-cuda\.so\S*", f"-o {var}/libggml-cuda-{v}.so", link.replace(obj, f"{var}/mmvq-{v}.o"))
    open(f"{var}/link-{v}.sh", "w").write(f"cd {shlex.quote(build)} && {lk}\n")
PY
CPIDS=()
for v in unpatched knownbad audit; do
    ( s=$SECONDS; sh "$VAR/compile-$v.sh" > "$LOGS/compile-$v.log" 2>&1; rc=$?; echo "compile $v: exit $rc, $((SECONDS - s)) s" >> "$LOGS/compile-$v.log"; exit $rc ) &
    CPIDS+=($!)
done
log "compiling the unpatched, known-bad and audit objects of mmvq.cu beside the build"

wait "$BUILD_PID"; BRC=$?
grep -E '^(fetch|patch|build|real) ' "$LOGS/onebit-build.log" | tee -a "$OUT/e2e.log"
[ "$BRC" = 0 ] || { tail -40 "$LOGS/onebit-build.log"; log "FAILED: onebit-build exit $BRC"; exit 1; }
cp "$WS/manifests/cuda.json" "$OUT/manifest.json" || { log "FAILED: no manifest"; exit 1; }
log "patches in the manifest: $("$PY" -c '
import json, sys
m = json.load(open(sys.argv[1]))
print(", ".join(p["name"] + " " + p.get("sha256", "")[:16] for s in m["sources"] for p in s["patches"]))' "$OUT/manifest.json")"
for i in 0 1 2; do
    wait "${CPIDS[$i]}" || { cat "$LOGS"/compile-*.log | tail -40; log "FAILED: a variant compile"; exit 1; }
done
tail -qn1 "$LOGS"/compile-*.log | tee -a "$OUT/e2e.log"

# 2. Three copies of bin/, differing only in libggml-cuda: the library relinked with the other
# object by the link command ninja has for it.
cp -a "$BD/bin" "$W/patched"
for v in unpatched knownbad; do
    sh "$VAR/link-$v.sh" > "$LOGS/link-$v.log" 2>&1 || { cat "$LOGS/link-$v.log"; log "FAILED: link $v"; exit 1; }
    cp -a "$BD/bin" "$W/$v"
    cp "$VAR/libggml-cuda-$v.so" "$(readlink -f "$W/$v/libggml-cuda.so.0")"
done
for b in unpatched patched knownbad; do
    lib=$(readlink -f "$W/$b/libggml-cuda.so.0")
    log "$b $(basename "$lib"): sha256 $(sha256sum "$lib" | cut -c1-16), row-tiled host symbols: $(nm -C "$lib" | grep -c 'mul_mat_vec_q4_0_q8_1_rt[sm]\?<')"
done

g++ -O2 -std=c++17 "$HERE/mmvq_harness.cpp" -I"$SRC/ggml/include" -L"$W/patched" -Wl,-rpath-link,"$W/patched" \
    -lggml -lggml-base -ldl -o "$W/mmvq_harness" > "$LOGS/harness.log" 2>&1 || { cat "$LOGS/harness.log"; log "FAILED: harness"; exit 1; }
g++ -O2 -std=c++17 "$HERE/greedy_batch.cpp" -I"$SRC/include" -I"$SRC/ggml/include" -L"$W/patched" \
    -Wl,-rpath-link,"$W/patched" -Wl,-rpath,'$ORIGIN' -lllama -lggml -lggml-base -o "$W/greedy_batch" \
    > "$LOGS/greedy-build.log" 2>&1 || { cat "$LOGS/greedy-build.log"; log "FAILED: greedy_batch"; exit 1; }
for b in unpatched patched; do cp "$W/greedy_batch" "$W/$b/"; done

# 3. Checker: the shipped patch (all groups), then the known-bad build (must fail).
export PYTHONUNBUFFERED=1
SEED_ARG=()
[ -n "${SEED:-}" ] && SEED_ARG=(--seed "$SEED")
log "check: unpatched vs patched"
"$PY" "$HERE/check_mmvq_q4_0.py" --harness "$W/mmvq_harness" --build "unpatched=$W/unpatched" --build "patched=$W/patched" \
    --workdir "$W" --table "$OUT/check.md" "${SEED_ARG[@]}" > "$LOGS/check.log" 2>&1
log "check exit $?: $(tail -1 "$LOGS/check.log")"
log "check: unpatched vs known-bad (exit 1 expected)"
"$PY" "$HERE/check_mmvq_q4_0.py" --harness "$W/mmvq_harness" --build "unpatched=$W/unpatched" --build "knownbad=$W/knownbad" \
    --groups base40,tail2 --workdir "$W" --table "$OUT/check-knownbad.md" > "$LOGS/check-knownbad.log" 2>&1
KB=$?
log "known-bad check exit $KB ($([ "$KB" = 1 ] && echo 'caught, as it must be' || echo 'NOT CAUGHT')): $(tail -1 "$LOGS/check-knownbad.log")"

# 4. Resource audit from the patched library's cubins and the ptxas report of the same file.
"$PY" "$HERE/resource_audit.py" "$(readlink -f "$W/patched/libggml-cuda.so.0")" "$LOGS/compile-audit.log" "$OUT/resources.md" \
    > "$LOGS/resources.log" 2>&1
log "resource audit exit $?: $(tail -1 "$LOGS/resources.log")"

# 5. End to end on the random-weight model.
wait "$MODEL_PID" || { cat "$LOGS/model.log"; log "FAILED: model"; exit 1; }
MODEL=$W/model.gguf
log "model: $(grep wrote "$LOGS/model.log"), $(stat -c %s "$MODEL") bytes"
log "greedy"
for n in 1 2 3 4 5 6 7 8; do
    for b in unpatched patched; do
        "$W/$b/greedy_batch" "$MODEL" "$HERE/greedy_prompts.txt" "$n" 128 "$W/greedy-$b-$n.jsonl" 99 \
            > "$LOGS/greedy-$b-$n.log" 2>&1 || log "greedy $b n=$n exit $?"
    done
done
log "batched-bench, $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
    order="unpatched patched"
    [ $((r % 2)) = 0 ] && order="patched unpatched"
    for b in $order; do
        "$W/$b/llama-batched-bench" -m "$MODEL" -ngl 99 -c 4096 -b 2048 -ub 512 -npp 128 -ntg 128 \
            -npl 1,2,3,4,5,6,7,8 --output-format jsonl > "$W/batched-$b-$r.jsonl" 2> "$LOGS/batched-$b-$r.log" \
            || log "batched-bench $b round $r exit $?"
    done
done
"$PY" "$HERE/e2e_tables.py" --workdir "$W" --rounds "$ROUNDS" --greedy "$OUT/greedy.md" \
    --batched "$OUT/batched.md" --json "$OUT/batched.json" 2>&1 | tee -a "$OUT/e2e.log"
log "tables exit ${PIPESTATUS[0]} (1: a greedy output differs or is missing)"
cp "$W"/greedy-*.jsonl "$W"/batched-*.jsonl "$LOGS/" 2>/dev/null

# 6. Copy bandwidth, then the MUL_MAT timing of both builds.
"$PY" "$HERE/copy_bandwidth.py" 2 20 > "$LOGS/bandwidth.log" 2>&1
BW=$(awk '/^bandwidth_gbs/ {print $2}' "$LOGS/bandwidth.log")
log "copy bandwidth: ${BW:-unknown} GB/s"
BW_ARG=()
[ -n "$BW" ] && BW_ARG=(--bandwidth-gbs "$BW")
log "perf: $PERF_SHAPES, $PERF_ROUNDS rounds x $PERF_REPS"
"$PY" "$HERE/perf_mmvq_q4_0.py" --harness "$W/mmvq_harness" --build "unpatched=$W/unpatched" --build "patched=$W/patched" \
    --shapes "$PERF_SHAPES" --rounds "$PERF_ROUNDS" --reps "$PERF_REPS" "${BW_ARG[@]}" \
    --json "$OUT/perf.json" --table "$OUT/perf.md" > "$LOGS/perf.log" 2>&1
log "perf exit $?"
