#!/usr/bin/env bash
# Builds the unpatched and the patched ggml (CUDA, sm_90) from one llama.cpp tree at the pin,
# checks the row-tiled Q4_0 kernel bit for bit and against float64, and times both side by side.
#
# usage: kernels/row-tiled-q4_0/tools/h200_run.sh LLAMA_SRC OUTDIR
#   LLAMA_SRC  unpatched llama.cpp tree at the pinned commit (CMakeLists.txt, cmake/, ggml/, src/,
#              include/, vendor/, licenses/, and app/ and tools/ui/ are needed: the top-level
#              CMakeLists.txt reads include/ and configure fails without it)
#   OUTDIR     receives check.md, known-bad.md, resources.md, perf.md, perf.json, machine.txt,
#              logs.tar.gz (NCU_SHAPES also ncu.txt)
#
# The ggml tree is built once; the patched builds differ only in mmvq.cu, so their object is
# compiled from the exported compile command while the main build runs, and libggml-cuda is
# relinked with it. Environment: JOBS (default nproc), DEADLINE_S (default 570, stages that would
# start later are skipped), SEED (checker seed, default random), WORKDIR (default mktemp),
# PERF_SHAPES (MxK list for the timing, default five shapes), PERF_NS (column counts,
# default 1..8), PERF=0 (no base-vs-patched timing), CHECK_GROUPS (checker groups, default all),
# ON_TOP (NAME=PATCH,...: candidates, each applied on top of the patch, built, checked and timed beside it), KNOWN_BAD
# (default 1: the patch plus known-bad.patch is built too, and the checker must exit 1 on it),
# CHECK=0 (no check), CHECK_EXTRA=0 (candidates and variant builds are timed but not checked), VARIANT_BUILDS (space-separated NAME=CANDIDATE:VAR=VALUE: more builds that run a candidate's library
# with an environment variable set, checked and timed like the candidates; with it the candidates
# themselves are checked and timed only when listed here too), CHECK_ARGS (more checker arguments),
# NCU_SHAPES (MxKxN list: Nsight Compute speed-of-light, occupancy, memory and warp-state sections of
# the mat-vec kernel of the builds named in NCU_BUILD_NAMES, default base,patched, into ncu.txt). A WORKDIR kept from an earlier call is reused: the
# ggml build is then only checked by ninja.
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
DEADLINE_S=${DEADLINE_S:-570}
SEED_ARG=()
[ -n "${SEED:-}" ] && SEED_ARG=(--seed "$SEED")
T0=$(date +%s)
mkdir -p "$LOGS" "$W/var"

log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( DEADLINE_S - ($(date +%s) - T0) )); }
finish() {
    tar -C "$W" -czf "$OUT/logs.tar.gz" logs 2>/dev/null
    log "done"
}
trap finish EXIT

{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv
    nvidia-smi -q -d CLOCK | sed -n '1,40p'
    nvcc --version | tail -2
    echo "cpus: $(nproc)"; uname -r
} > "$OUT/machine.txt" 2>&1
log "machine: $(head -2 "$OUT/machine.txt" | tail -1)"

cmake -S "$SRC" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
    -DCMAKE_SKIP_BUILD_RPATH=ON -DGGML_NATIVE=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
    -DGGML_CUDA_COMPRESSION_MODE=none -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF \
    -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_OPENSSL=OFF > "$LOGS/configure.log" 2>&1 || { log "configure failed"; tail -30 "$LOGS/configure.log"; exit 1; }
log "configured"

# patched sources of mmvq.cu, outside the source tree (ggml-cuda globs *.cu)
apply_to() { # original file, patch, output file (the patches touch ggml/src/ggml-cuda/mmvq.cu only)
    local d
    d=$(mktemp -d) && mkdir -p "$d/ggml/src/ggml-cuda" && cp "$1" "$d/ggml/src/ggml-cuda/mmvq.cu" || return 1
    if command -v patch > /dev/null; then
        (cd "$d" && patch -s -p1 < "$2") || return 1
    else
        (cd "$d" && git apply "$2") || return 1
    fi
    cp "$d/ggml/src/ggml-cuda/mmvq.cu" "$3"
}
VARIANTS=(rt)
apply_to "$SRC/ggml/src/ggml-cuda/mmvq.cu" "$PATCH" "$W/var/mmvq-rt.cu" || { log "patch failed"; exit 1; }
if [ "${KNOWN_BAD:-1}" = 1 ]; then
    apply_to "$W/var/mmvq-rt.cu" "$HERE/known-bad.patch" "$W/var/mmvq-bad.cu" || { log "known-bad patch failed"; exit 1; }
    VARIANTS+=(bad)
fi
EXTRA_NAMES=()
IFS=, read -r -a extra_list <<< "${ON_TOP:-}"
for e in "${extra_list[@]}"; do
    name=${e%%=*}
    apply_to "$W/var/mmvq-rt.cu" "$(cd "$(dirname "${e#*=}")" && pwd)/$(basename "${e#*=}")" "$W/var/mmvq-$name.cu" \
        || { log "candidate $e does not apply on top of the patch"; exit 1; }
    VARIANTS+=("$name")
    EXTRA_NAMES+=("$name")
done

python3 - "$B" "$SRC/ggml/src/ggml-cuda" "$W/var" "${VARIANTS[@]}" <<'PY' || exit 1
import json, re, shlex, subprocess, sys
build, cudadir, var, *variants = sys.argv[1:]
entry = next(e for e in json.load(open(f"{build}/compile_commands.json")) if e["file"].endswith("ggml-cuda/mmvq.cu"))
obj = re.search(r" -o (\S+)", entry["command"]).group(1)
link = [l for l in subprocess.run(["ninja", "-C", build, "-t", "commands", "ggml-cuda"], capture_output=True,
        text=True, check=True).stdout.splitlines() if "-soname,libggml-cuda.so" in l][0]
for v in variants:
    cmd = entry["command"].replace(entry["file"], f"{var}/mmvq-{v}.cu").replace(f" -o {obj}", f" -o {var}/mmvq-{v}.o")
    if v not in ("base", "bad"):  # the ptxas report (registers, stack, spills) for the resource audit; same code
        cmd += " -Xptxas -v"
    open(f"{var}/compile-{v}.sh", "w").write(f"cd {shlex.quote(entry['directory'])} && {cmd} -I{cudadir}\n")
    lk = link.replace(obj, f"{var}/mmvq-{v}.o")
    lk = re.sub(r"-o bin/libggml-cuda\.so\S*", f"-o {var}/lib-{v}/libggml-cuda.so.0", lk)
    open(f"{var}/link-{v}.sh", "w").write(f"cd {shlex.quote(build)} && {lk}\n")
PY

pids=()
for v in "${VARIANTS[@]}"; do
    ( s=$SECONDS; sh "$W/var/compile-$v.sh" > "$LOGS/compile-$v.log" 2>&1; rc=$?; echo "$((SECONDS - s)) s" >> "$LOGS/compile-$v.log"; exit $rc ) &
    pids+=($!)
done
( time ninja -C "$B" -j"$JOBS" ggml ) > "$LOGS/build.log" 2>&1 || { log "build failed"; tail -40 "$LOGS/build.log"; exit 1; }
log "base ggml built ($(grep -c 'Building CUDA' "$LOGS/build.log") CUDA objects)"
g++ -O2 -std=c++17 "$HERE/mmvq_harness.cpp" -I"$SRC/ggml/include" -L"$B/bin" -Wl,-rpath-link,"$B/bin" -lggml -lggml-base -ldl \
    -o "$W/mmvq_harness" > "$LOGS/harness.log" 2>&1 || { log "harness build failed"; cat "$LOGS/harness.log"; exit 1; }
for i in "${!pids[@]}"; do
    v=${VARIANTS[$i]}
    wait "${pids[$i]}" || { log "compile of mmvq-$v failed"; tail -40 "$LOGS/compile-$v.log"; exit 1; }
    mkdir -p "$W/var/lib-$v"
    cp -a "$B"/bin/libggml*.so* "$W/var/lib-$v/"
    rm -f "$W/var/lib-$v"/libggml-cuda.so*
    sh "$W/var/link-$v.sh" > "$LOGS/link-$v.log" 2>&1 || { log "link of $v failed"; cat "$LOGS/link-$v.log"; exit 1; }
    log "mmvq-$v compiled in $(tail -1 "$LOGS/compile-$v.log") and linked"
done
nm -C "$W/var/lib-rt/libggml-cuda.so.0" | grep -c "mul_mat_vec_q4_0_q8_1_rt<" \
    | sed 's/^/row-tiled kernel host symbols in the patched library: /' | tee "$LOGS/kernels.txt"

BASE="base=$B/bin"
RT="patched=$W/var/lib-rt"
EXTRA_BUILDS=()
if [ -n "${VARIANT_BUILDS:-}" ]; then
    for spec in $VARIANT_BUILDS; do # NAME=CANDIDATE:VAR=VALUE
        name=${spec%%=*}; rest=${spec#*=}; cand=${rest%%:*}; envs=${rest#*:}
        [ "$envs" = "$rest" ] && envs=""
        EXTRA_BUILDS+=(--build "$name=$W/var/lib-$cand${envs:+,$envs}")
    done
else
    for name in "${EXTRA_NAMES[@]}"; do
        EXTRA_BUILDS+=(--build "$name=$W/var/lib-$name")
    done
fi

run_stage() { # name, seconds it needs at least, command...
    local name=$1 need=$2; shift 2
    if [ "$(left)" -lt "$need" ]; then
        log "SKIPPED $name: $(left) s left"
        return 1
    fi
    log "start $name"
    timeout "$(left)" "$@" > "$LOGS/$name.log" 2>&1
    local rc=$?
    log "$name exit $rc"
    return $rc
}

export PYTHONUNBUFFERED=1
GROUPS_ARG=()
[ -n "${CHECK_GROUPS:-}" ] && GROUPS_ARG=(--groups "$CHECK_GROUPS")
CHECK_EXTRA_BUILDS=("${EXTRA_BUILDS[@]}")
[ "${CHECK_EXTRA:-1}" = 0 ] && CHECK_EXTRA_BUILDS=() # CHECK_EXTRA=0: candidates and variant builds are timed, not checked
[ "${CHECK:-1}" = 1 ] && run_stage check 60 python3 "$HERE/check_mmvq_q4_0.py" --harness "$W/mmvq_harness" --build "$BASE" --build "$RT" \
    "${CHECK_EXTRA_BUILDS[@]}" "${GROUPS_ARG[@]}" ${CHECK_ARGS:-} --workdir "$W" --table "$OUT/check.md" "${SEED_ARG[@]}"
tail -3 "$LOGS/check.log"
if [ "${KNOWN_BAD:-1}" = 1 ]; then
    run_stage known-bad 30 python3 "$HERE/check_mmvq_q4_0.py" --harness "$W/mmvq_harness" --build "$BASE" \
        --build "known-bad=$W/var/lib-bad" --groups "${KNOWN_BAD_GROUPS:-base40}" --workdir "$W" --table "$OUT/known-bad.md" "${SEED_ARG[@]}"
    rc=$?
    tail -3 "$LOGS/known-bad.log"
    if [ "$rc" = 1 ]; then log "known-bad build: the checker exits 1, as it must"; else log "KNOWN-BAD NOT CAUGHT: checker exit $rc"; fi
fi

# resources of the patched file's row-tiled instantiations (exit 1 on spills, stack or local memory)
run_stage audit 10 python3 "$HERE/resource_audit.py" "$W/var/lib-rt/libggml-cuda.so.0" "$LOGS/compile-rt.log" "$OUT/resources.md"
tail -1 "$LOGS/audit.log"
for name in "${EXTRA_NAMES[@]}"; do # the candidates' too (resources-NAME.md)
    run_stage "audit-$name" 10 python3 "$HERE/resource_audit.py" "$W/var/lib-$name/libggml-cuda.so.0" "$LOGS/compile-$name.log" \
        "$OUT/resources-$name.md"
    tail -1 "$LOGS/audit-$name.log"
done

run_stage bandwidth 20 python3 "$HERE/copy_bandwidth.py" 2 20
BW=$(awk '/^bandwidth_gbs/ {print $2}' "$LOGS/bandwidth.log")
head -1 "$LOGS/bandwidth.log"
BW_ARG=()
[ -n "$BW" ] && BW_ARG=(--bandwidth-gbs "$BW")

ROUNDS=${ROUNDS:-3}
PERF_SHAPES=${PERF_SHAPES:-4096x4096,4096x14336,14336x4096,5120x17408,4096x11008}
if [ "${PERF:-1}" = 1 ]; then
    run_stage perf 40 python3 "$HERE/perf_mmvq_q4_0.py" --harness "$W/mmvq_harness" --build "$BASE" --build "$RT" \
        "${EXTRA_BUILDS[@]}" --shapes "$PERF_SHAPES" --ns "${PERF_NS:-1,2,3,4,5,6,7,8}" --rounds "$ROUNDS" --reps 50 "${BW_ARG[@]}" \
        --json "$OUT/perf.json" --table "$OUT/perf.md"
    tail -90 "$LOGS/perf.log"
fi

# Nsight Compute on the mat-vec kernel of each build (one launch each, after 20 warm-up launches)
if [ -n "${NCU_SHAPES:-}" ] && command -v ncu > /dev/null; then
    NCU_BUILDS=("$BASE" "$RT" "${EXTRA_BUILDS[@]/#--build/}")
    for shape in ${NCU_SHAPES//,/ }; do
        IFS=x read -r m k n <<< "$shape"
        for spec in "${NCU_BUILDS[@]}"; do
            [ -z "${spec// /}" ] && continue
            name=${spec%%=*}; rest=${spec#*=}; lib=${rest%%,*}; envs=()
            [[ ",${NCU_BUILD_NAMES:-base,patched}," == *",$name,"* ]] || continue
            [ "$rest" != "$lib" ] && envs=("${rest#*,}")
            [ "$(left)" -lt 25 ] && { log "SKIPPED ncu $shape $name: $(left) s left"; continue; }
            echo "=== $m x $k n=$n build $name" >> "$OUT/ncu.txt"
            env LD_LIBRARY_PATH="$lib" "${envs[@]}" timeout 60 ncu --clock-control none --section SpeedOfLight \
                --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
                -k regex:mul_mat_vec --launch-skip 20 --launch-count 1 "$W/mmvq_harness" perf CUDA0 "$m" "$k" "$n" 2 \
                >> "$OUT/ncu.txt" 2>&1
            log "ncu $shape $name exit $?"
        done
    done
    grep -E "^===|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Registers Per|Block Limit|Waves Per SM" "$OUT/ncu.txt" | head -150
fi
