#!/usr/bin/env bash
# End to end at few sequences, without the tool: why 2..3 sequences can lose although their mat-vec
# kernel is upstream's. From one unpatched llama.cpp tree at the pin: ggml (CUDA, sm_90), libllama and
# llama-batched-bench built once; libggml-cuda relinked with the patched mmvq.cu (the only difference
# between the two builds); the random-weight llama model written meanwhile. Then
#   1. greedy decoding (greedy_batch.cpp) of 1..4 and 8 sequences with both builds: tokens and a hash
#      of every logits row compared;
#   2. llama-batched-bench of both builds, ROUNDS rounds, the builds alternating and the order swapped
#      every round (generation t/s per number of sequences, median and min..max);
#   3. every kernel of a short 2-sequence run of each build under Nsight Compute (GPU time per
#      kernel, each replayed alone): which kernels run, how often, and for how long, per build.
#
# usage: kernels/row-tiled-q4_0/tools/h200_batched.sh LLAMA_SRC OUTDIR
#   LLAMA_SRC  unpatched llama.cpp tree at the pin (as for h200_run.sh, plus common/, tools/ and gguf-py/)
#   OUTDIR     receives batched.md, batched.json, greedy.md, kernels-2seq.md, e2e.log
# Environment: ROUNDS (default 6), NPL (default 1,2,3,4,8), LAYERS (default 8), FA (GGML_CUDA_FA, default ON
# as in the cuda recipe), JOBS, WORKDIR, DEADLINE_S (default 560: stages that
# would start later are skipped).
set -uo pipefail

SRC=$(cd "$1" && pwd)
OUT=$(mkdir -p "$2" && cd "$2" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
PATCH=$REPO/patches/llama.cpp/0002-mmvq-row-tiled-q4_0.patch
W=${WORKDIR:-$(mktemp -d)}
B=$W/build
LOGS=$W/logs
JOBS=${JOBS:-$(nproc)}
ROUNDS=${ROUNDS:-6}
NPL=${NPL:-1,2,3,4,8}
DEADLINE_S=${DEADLINE_S:-560}
T0=$(date +%s)
mkdir -p "$LOGS" "$W/var"
exec > >(tee -a "$OUT/e2e.log") 2>&1

log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( DEADLINE_S - ($(date +%s) - T0) )); }

( PYTHONPATH="$SRC/gguf-py${PYTHONPATH:+:$PYTHONPATH}" python3 "$HERE/make_random_llama.py" "$W/model.gguf" \
    --layers "${LAYERS:-8}" > "$LOGS/model.log" 2>&1 ) &
MODEL_PID=$!

cmake -S "$SRC" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
    -DCMAKE_SKIP_BUILD_RPATH=ON -DGGML_NATIVE=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DGGML_CUDA_COMPRESSION_MODE=none -DGGML_CUDA_FA="${FA:-ON}" -DGGML_CUDA_NCCL=OFF \
    -DLLAMA_BUILD_COMMON=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_OPENSSL=OFF > "$LOGS/configure.log" 2>&1 || { log "configure failed"; tail -30 "$LOGS/configure.log"; exit 1; }
log "configured"

# the patched mmvq.cu, compiled with the command ninja has for the original, and its link command
d=$(mktemp -d) && mkdir -p "$d/ggml/src/ggml-cuda" && cp "$SRC/ggml/src/ggml-cuda/mmvq.cu" "$d/ggml/src/ggml-cuda/" \
    && (cd "$d" && patch -s -p1 < "$PATCH") && cp "$d/ggml/src/ggml-cuda/mmvq.cu" "$W/var/mmvq-rt.cu" || { log "patch failed"; exit 1; }
python3 - "$B" "$SRC/ggml/src/ggml-cuda" "$W/var" <<'PY' || exit 1
import json, re, shlex, subprocess, sys
build, cudadir, var = sys.argv[1:]
entry = next(e for e in json.load(open(f"{build}/compile_commands.json")) if e["file"].endswith("ggml-cuda/mmvq.cu"))
obj = re.search(r" -o (\S+)", entry["command"]).group(1)
link = [l for l in subprocess.run(["ninja", "-C", build, "-t", "commands", "ggml-cuda"], capture_output=True,
        text=True, check=True).stdout.splitlines() if "-soname,libggml-cuda.so" in l][0]
cmd = entry["command"].replace(entry["file"], f"{var}/mmvq-rt.cu").replace(f" -o {obj}", f" -o {var}/mmvq-rt.o")
open(f"{var}/compile-rt.sh", "w").write(f"cd {shlex.quote(entry['directory'])} && {cmd} -I{cudadir}\n")
lk = re.sub(r"-o bin/libggml-cuda\.so\S*", f"-o {var}/lib-rt/libggml-cuda.so.0", link.replace(obj, f"{var}/mmvq-rt.o"))
open(f"{var}/link-rt.sh", "w").write(f"cd {shlex.quote(build)} && {lk}\n")
PY
sh "$W/var/compile-rt.sh" > "$LOGS/compile-rt.log" 2>&1 &
RT_PID=$!
( time ninja -C "$B" -j"$JOBS" ggml llama llama-batched-bench ) > "$LOGS/build.log" 2>&1 \
    || { log "build failed"; tail -40 "$LOGS/build.log"; exit 1; }
log "ggml, libllama and llama-batched-bench built"
wait "$RT_PID" || { log "compile of the patched mmvq.cu failed"; tail -30 "$LOGS/compile-rt.log"; exit 1; }
mkdir -p "$W/var/lib-rt"
sh "$W/var/link-rt.sh" > "$LOGS/link-rt.log" 2>&1 || { log "link failed"; cat "$LOGS/link-rt.log"; exit 1; }
# two library folders that differ only in libggml-cuda
mkdir -p "$W/unpatched" "$W/patched"
cp -a "$B"/bin/*.so* "$W/unpatched/" && cp -a "$B"/bin/*.so* "$W/patched/"
rm -f "$W/patched"/libggml-cuda.so* && cp "$W/var/lib-rt/libggml-cuda.so.0" "$W/patched/"
(cd "$W/patched" && ln -sf libggml-cuda.so.0 libggml-cuda.so)
sha256sum "$W"/unpatched/libggml-cuda.so.0 "$W"/patched/libggml-cuda.so.0 | sed "s#$W/##"
g++ -O2 -std=c++17 "$HERE/greedy_batch.cpp" -I"$SRC/include" -I"$SRC/ggml/include" -L"$W/unpatched" \
    -Wl,-rpath-link,"$W/unpatched" -lllama -lggml -lggml-base -o "$W/greedy_batch" > "$LOGS/greedy-build.log" 2>&1 \
    || { cat "$LOGS/greedy-build.log"; log "greedy_batch build failed"; exit 1; }
wait "$MODEL_PID" || { tail -20 "$LOGS/model.log"; log "model failed"; exit 1; }
MODEL=$W/model.gguf
log "model: $(tail -1 "$LOGS/model.log")"

run_with() { # build, command...
    local b=$1; shift
    LD_LIBRARY_PATH="$W/$b" "$@"
}

log "greedy"
for n in ${NPL//,/ }; do
    for b in unpatched patched; do
        run_with "$b" "$W/greedy_batch" "$MODEL" "$HERE/greedy_prompts.txt" "$n" 128 "$W/greedy-$b-$n.jsonl" 99 \
            > "$LOGS/greedy-$b-$n.log" 2>&1 || log "greedy $b n=$n exit $?"
    done
done

log "batched-bench, $ROUNDS rounds"
for r in $(seq 1 "$ROUNDS"); do
    order="unpatched patched"
    [ $((r % 2)) = 0 ] && order="patched unpatched"
    for b in $order; do
        [ "$(left)" -lt 60 ] && { log "SKIPPED batched-bench $b round $r: $(left) s left"; continue; }
        run_with "$b" "$B/bin/llama-batched-bench" -m "$MODEL" -ngl 99 -c 4096 -b 2048 -ub 512 -npp 128 -ntg 128 \
            -npl "$NPL" --output-format jsonl > "$W/batched-$b-$r.jsonl" 2> "$LOGS/batched-$b-$r.log" \
            || log "batched-bench $b round $r exit $?"
    done
    log "round $r done"
done
python3 "$HERE/e2e_tables.py" --workdir "$W" --rounds "$ROUNDS" --ns "$NPL" --greedy "$OUT/greedy.md" \
    --batched "$OUT/batched.md" --json "$OUT/batched.json"
log "tables exit $? (1: a greedy output differs or is missing)"

# every kernel of a short run (16-token prompt per sequence, 8 generated tokens), GPU time under ncu
if command -v ncu > /dev/null; then
    for pl in 2; do
        for b in unpatched patched; do
            [ "$(left)" -lt 45 ] && { log "SKIPPED ncu $b $pl: $(left) s left"; continue; }
            run_with "$b" timeout "$(( $(left) - 20 ))" ncu --csv --print-units base --metrics gpu__time_duration.sum \
                --clock-control none "$B/bin/llama-batched-bench" -m "$MODEL" -ngl 99 -c 1024 -b 2048 -ub 512 \
                -npp 16 -ntg 8 -npl "$pl" > "$W/ncu-$b-$pl.csv" 2> "$LOGS/ncu-$b-$pl.log"
            log "ncu $b $pl sequences exit $?"
        done
        python3 - "$W/ncu-unpatched-$pl.csv" "$W/ncu-patched-$pl.csv" "$OUT/kernels-${pl}seq.md" <<'PY'
import csv, io, re, sys
def read(path):
    text = open(path, errors="replace").read()
    text = text[text.find('"ID"'):] if '"ID"' in text else ""
    out = {}
    for row in csv.DictReader(io.StringIO(text)):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = re.sub(r"\(.*", "", row["Kernel Name"]).strip()
        v = float(row["Metric Value"].replace(",", "")) / 1000.0
        out.setdefault(name, []).append(v)
    return out
u, p = read(sys.argv[1]), read(sys.argv[2])
rows = ["| kernel | unpatched launches | patched launches | unpatched us (sum) | patched us (sum) | patched / unpatched |", "|---|---|---|---|---|---|"]
for k in sorted(set(u) | set(p), key=lambda k: -sum(u.get(k, [0]))):
    su, sp = sum(u.get(k, [])), sum(p.get(k, []))
    rows.append(f"| `{k[:90]}` | {len(u.get(k, []))} | {len(p.get(k, []))} | {su:.1f} | {sp:.1f} | {sp / su if su else float('nan'):.3f} |")
tu, tp = sum(map(sum, u.values())), sum(map(sum, p.values()))
rows.append(f"| all | {sum(map(len, u.values()))} | {sum(map(len, p.values()))} | {tu:.1f} | {tp:.1f} | {tp / tu if tu else float('nan'):.3f} |")
open(sys.argv[3], "w").write("\n".join(rows) + "\n")
print("\n".join(rows[:14] + rows[-1:]))
PY
    done
fi
log "done"
