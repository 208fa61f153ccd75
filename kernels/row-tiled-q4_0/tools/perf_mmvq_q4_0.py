#!/usr/bin/env python3
"""Side-by-side timing of MUL_MAT q4_0 x f32 across ggml builds, with mmvq_harness.

For every round, shape and build (builds interleaved within a shape, so the compared builds run
minutes apart at most) the harness times a graph of independent MUL_MAT nodes that cycle through
at least 512 MiB of distinct weights, REPS times, and reports the median per node. The table
gives, per build, the median over rounds of those medians; achieved bandwidth counts the bytes
that must move at least once (q4_0 weights, f32 activations, f32 result).

Usage:
  perf_mmvq_q4_0.py --harness PATH --build base=LIBDIR --build patched=LIBDIR[,VAR=VALUE] \
      [--shapes 4096x4096,4096x14336,14336x4096] [--ns 1,2,...] [--reps 50] [--rounds 3] \
      [--bandwidth-gbs X] [--json FILE] [--table FILE]
Shapes are MxK (M weight rows = output rows, K the reduced dimension).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from mdtable import md_table


def parse_build(spec: str):
    name, _, rest = spec.partition("=")
    parts = rest.split(",")
    env = dict(p.partition("=")[::2] for p in parts[1:])
    if not name or not parts[0]:
        raise SystemExit(f"bad --build {spec!r}: want NAME=LIBDIR[,VAR=VALUE...]")
    return name, parts[0], env


def min_bytes(m: int, k: int, n: int) -> int:
    return m * (k // 32) * 18 + n * k * 4 + n * m * 4


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harness", required=True)
    ap.add_argument("--build", action="append", required=True)
    ap.add_argument("--backend", default="CUDA0")
    ap.add_argument("--shapes", default="4096x4096,4096x14336,14336x4096")
    ap.add_argument("--ns", default="1,2,3,4,5,6,7,8")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bandwidth-gbs", type=float, default=None, help="measured copy bandwidth, for the %% column")
    ap.add_argument("--json", default=None)
    ap.add_argument("--table", default=None)
    args = ap.parse_args()

    builds = [parse_build(b) for b in args.build]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    ns = [int(v) for v in args.ns.split(",")]

    samples: dict = {}  # (build, m, k, n) -> [median_us per round]
    for rnd in range(args.rounds):
        for m, k in shapes:
            for name, libdir, env in builds:
                run_env = dict(os.environ)
                run_env.update(env)
                run_env["LD_LIBRARY_PATH"] = libdir + (":" + os.environ["LD_LIBRARY_PATH"]
                                                       if os.environ.get("LD_LIBRARY_PATH") else "")
                cmd = [args.harness, "perf", args.backend, str(m), str(k), ",".join(map(str, ns)), str(args.reps)]
                r = subprocess.run(cmd, env=run_env, text=True, capture_output=True)
                if r.returncode != 0:
                    sys.stderr.write(r.stdout + r.stderr)
                    print(f"FAIL: harness exited {r.returncode} for {name} {m}x{k}")
                    return 1
                for line in r.stdout.splitlines():
                    f = line.split()
                    if f and f[0] == "perf":
                        key = (name, int(f[1]), int(f[2]), int(f[3]))
                        samples.setdefault(key, []).append(float(f[6]))
                    elif f and f[0] == "backend" and rnd == 0:
                        print(f"[{name}] {line}")
            print(f"round {rnd + 1}/{args.rounds} {m}x{k} done", flush=True)
        # the table so far (all shapes of the rounds done), so that a run cut short keeps its rounds
        write_results(args, builds, shapes, ns, samples, final=rnd + 1 == args.rounds)
    return 0


def write_results(args, builds, shapes, ns, samples, final: bool) -> None:
    ref = builds[0][0]
    header = ["M", "K", "n"]
    for name, _, _ in builds:
        header.append(f"{name} us")
    for name, _, _ in builds[1:]:
        header.append(f"{name} speedup")
    for name, _, _ in builds:
        header.append(f"{name} GB/s" + (" (% of copy)" if args.bandwidth_gbs else ""))
    header.append("spread")
    rows = []
    result = []
    for m, k in shapes:
        for n in ns:
            med = {name: statistics.median(samples[(name, m, k, n)]) for name, _, _ in builds}
            row = [str(m), str(k), str(n)]
            row += [f"{med[name]:.2f}" for name, _, _ in builds]
            row += [f"{med[ref] / med[name]:.3f}x" for name, _, _ in builds[1:]]
            for name, _, _ in builds:
                gbs = min_bytes(m, k, n) / (med[name] * 1e-6) / 1e9
                row.append(f"{gbs:.0f}" + (f" ({100 * gbs / args.bandwidth_gbs:.0f}%)" if args.bandwidth_gbs else ""))
            # largest relative spread of the round medians of any build: the noise floor
            spread = max((max(samples[(b, m, k, n)]) - min(samples[(b, m, k, n)])) / med[b] for b, _, _ in builds)
            row.append(f"{100 * spread:.1f}%")
            rows.append(row)
            result.append({"m": m, "k": k, "n": n, "median_us": med,
                           "rounds_us": {b: samples[(b, m, k, n)] for b, _, _ in builds}})

    table = md_table(header, rows)
    nrounds = len(next(iter(samples.values())))
    if final:
        print(table)
    if args.table:
        Path(args.table).write_text(table + "\n" + ("" if final else f"\n(after {nrounds} of {args.rounds} rounds)\n"))
    if args.json:
        Path(args.json).write_text(json.dumps({"reps": args.reps, "rounds": args.rounds, "rounds_done": nrounds,
                                               "bandwidth_gbs": args.bandwidth_gbs, "results": result}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
