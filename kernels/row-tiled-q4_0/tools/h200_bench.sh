#!/usr/bin/env bash
# Kernel shapes on one GPU, no ggml build: bit-identity of every variant against mul_mat_vec_q,
# side-by-side timing per MUL_MAT node, and a profiler pass on a few kernels.
# usage: kernels/row-tiled-q4_0/tools/h200_bench.sh RT_BENCH OUTDIR [SHAPES] [VARIANTS]
set -uo pipefail
B=$1
OUT=$2
SHAPES=${3:-4096x4096,4096x14336,14336x4096,5120x17408}
VARS=${4:-}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit --format=csv > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
"$B" check 2>&1 | tee "$OUT/bench-check.txt" | tail -5
"$B" perf "$SHAPES" 5678 20 3 $VARS > "$OUT/bench-perf.md" 2> "$OUT/bench-perf.log"
echo "perf exit $?"
cat "$OUT/bench-perf.md"
if command -v ncu > /dev/null && [ -n "${NCU_SHAPE:-}" ]; then
    timeout 120 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section LaunchStats \
        --section Occupancy -k regex:mul_mat_vec "$B" once "$NCU_SHAPE" 8 "${NCU_VARS:-patch}" > "$OUT/ncu.txt" 2>&1
    echo "ncu exit $?"
    grep -E "mul_mat_vec|Duration|Memory Throughput|DRAM Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Stall|Warp Cycles Per Issued" "$OUT/ncu.txt" | head -120
fi
