"""Per-kernel GPU times of one MUL_MAT (q4_0 x f32) under Nsight Compute, per build.

The timing script measures a whole MUL_MAT node: the q8_1 quantization kernel of the
activations plus the mat-vec kernel. This script splits that: it profiles the harness's
perf mode under `ncu` (each kernel replayed alone with caches flushed, clocks as found) and
prints the median duration of each kernel, per build, shape and column count.

usage: kernel_times.py --harness H --build NAME=LIBDIR [--build ...] [--shapes 4096x4096,...]
                       [--ns 5,8] [--count 30] [--table OUT.md]
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import statistics
import subprocess
import sys


def classify(kernel: str) -> str:
    if "quantize" in kernel:
        return "quantize"
    if "mul_mat_vec" in kernel:
        return "mat-vec (row-tiled)" if "_rt" in kernel else "mat-vec"
    return "other"


def profile(ncu: str, harness: str, libdir: str, m: int, k: int, n: int, count: int) -> dict[str, list[float]]:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    cmd = [ncu, "--csv", "--print-units", "base", "--metrics", "gpu__time_duration.sum", "--cache-control", "all",
           "--clock-control", "none", "-k", "regex:quantize|mul_mat_vec", "--launch-skip", "40", "--launch-count",
           str(count), harness, "perf", "CUDA0", str(m), str(k), str(n), "2"]
    r = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"ncu exit {r.returncode}: {r.stderr[-600:]}")
    text = r.stdout[r.stdout.find('"ID"'):]
    out: dict[str, list[float]] = {}
    for row in csv.DictReader(io.StringIO(text)):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = row.get("Metric Unit", "ns")
        val = float(row["Metric Value"].replace(",", ""))
        scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3}.get(unit, 1e-3)
        out.setdefault(classify(row["Kernel Name"]), []).append(val * scale)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--harness", required=True)
    ap.add_argument("--build", action="append", required=True, help="NAME=LIBDIR")
    ap.add_argument("--shapes", default="4096x4096,4096x14336,14336x4096")
    ap.add_argument("--ns", default="5,8")
    ap.add_argument("--count", type=int, default=30)
    ap.add_argument("--table", default=None)
    a = ap.parse_args(argv)
    ncu = shutil.which("ncu")
    if ncu is None:
        print("ncu not found: Nsight Compute is needed", file=sys.stderr)
        return 2
    builds = [b.split("=", 1) for b in a.build]
    rows = ["| M x K | n | build | quantize us | mat-vec us | mat-vec kernel | kernels profiled |",
            "|---|---|---|---|---|---|---|"]
    base_mv: dict[tuple, float] = {}
    for shape in a.shapes.split(","):
        m, k = (int(x) for x in shape.split("x"))
        for n in (int(x) for x in a.ns.split(",")):
            for name, lib in builds:
                try:
                    t = profile(ncu, a.harness, lib, m, k, n, a.count)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    rows.append(f"| {m} x {k} | {n} | {name} | - | - | failed: {str(e)[:80]} | 0 |")
                    continue
                q = statistics.median(t["quantize"]) if t.get("quantize") else float("nan")
                mv_name = next((c for c in t if c.startswith("mat-vec")), None)
                mv = statistics.median(t[mv_name]) if mv_name else float("nan")
                key = (m, k, n)
                if key not in base_mv:
                    base_mv[key] = mv
                    rel = ""
                else:
                    rel = f" ({base_mv[key] / mv:.3f}x)"
                rows.append(f"| {m} x {k} | {n} | {name} | {q:.2f} | {mv:.2f}{rel} | {mv_name} | "
                            f"{sum(len(v) for v in t.values())} |")
                print(rows[-1], flush=True)
    if a.table:
        with open(a.table, "w") as f:
            f.write("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
