#!/usr/bin/env python3
"""Bit-identity and accuracy check of the row-tiled Q4_0 x Q8_1 mat-vec kernel.

Runs the same MUL_MAT cases (q4_0 weights x f32 activations) through two or more ggml builds
with mmvq_harness and checks that
  (a) every build's output equals the first build's (the unpatched one) bit for bit, and
  (b) every output is within a derived error bound of a float64 reference.

Inputs are drawn fresh from a seed that is printed (pass --seed to repeat a run). The harness
fills each output with NaN bytes before the run, so an unwritten element shows up as NaN.

Tolerances. The CUDA backend quantizes the activations to q8_1 before the dot products: per block
of 32 values d = amax/127 (float32), q = round(x/d), d and s = sum(x) stored as fp16, and a Q4_0 block
contributes d_w * (sum(q_w * q) * d_h - 8 * s_h) with unsigned nibbles q_w in 0..15. Two references:
  q8_1 model: the exact float64 product after that quantization, emulated here. Tolerance: float32
      rounding, (ceil(blocks/32) + 10) * 2^-23 * T with T the sum of the absolute block terms, plus one
      quantum for every value whose rounding sits so close to a tie that the device's approximate
      division may round it the other way. Column "err/tol q8_1", for every build.
  exact: the float64 product of the given inputs. Bound: the worst case of the q8_1 step,
      sum over blocks |d_w| * (sum(q_w) * e_x + 8 * e_s) with e_x = 0.5001 d + 127 |d_h - d| and
      e_s = |s_h - s| + 2^-19 sum|x|, times 1.01, plus the q8_1-model tolerance. Column
      "err/bound f64", for the first build (the others have the same bits or fail (a)).
A case passes when every ratio |out - ref| / tolerance is <= 1. Backends that quantize differently
(the CPU uses q8_0) need --q8-model none, which keeps only the exact bound.

Usage:
  check_mmvq_q4_0.py --harness PATH --build base=LIBDIR --build patched=LIBDIR [--build NAME=LIBDIR,VAR=VALUE]
The first --build is the reference for the bitwise comparison.
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mdtable import md_table

MODES = ("normal", "scales", "edges", "saturated")
QK = 32


@dataclass(frozen=True)
class Case:
    group: str
    rows: int
    blocks: int
    ncols: int
    mode: str

    @property
    def k(self) -> int:
        return self.blocks * QK

    @property
    def name(self) -> str:
        return f"{self.group}-r{self.rows}-b{self.blocks}-n{self.ncols}-{self.mode}"


def build_cases() -> list[Case]:
    cases: list[Case] = []
    # the 40 cases: 10 shapes x 4 input modes
    shapes = [(512, 96, n) for n in range(1, 9)] + [(5120, 1024, 8), (17408, 256, 3)]
    for mode in MODES:
        for rows, blocks, n in shapes:
            cases.append(Case("base40", rows, blocks, n, mode))
    # row counts that are odd (never a multiple of the rows per warp) or only even
    odd = [(511, 96, n) for n in range(5, 9)] + [(4097, 128, 8), (33, 96, 6), (1, 96, 7), (510, 96, 8), (4094, 128, 5)]
    for mode in MODES:
        for rows, blocks, n in odd:
            cases.append(Case("oddrows", rows, blocks, n, mode))
    # at or just below the patch's minimum row count: 4100 and 4108 are multiples of 4 but not of 8,
    # so the last block of the row-tiled grid (2 row groups of 4) has an empty row group; 4092 stays
    # on the old path
    tail = [(4100, 96, n) for n in range(5, 9)] + [(4108, 40, 7), (4092, 96, 8)]
    for mode in MODES:
        for rows, blocks, n in tail:
            cases.append(Case("tailrows", rows, blocks, n, mode))
    # row counts = 1, 2, 3 (mod 4) above the minimum row count, on each form of the patch: register
    # form (4097 x 4096 at 5..7 columns, 4099 x 4160 whose rows are not a multiple of 256 values),
    # shared-memory form (4098 x 17408 at 5, 6 columns), tensor-core form (8 columns; 7 columns from
    # 32M weights), whose 16-row tiles end in 1, 2, 3 or 15 rows here
    tail2 = ([(4097, 128, n) for n in range(5, 9)] + [(4098, 544, n) for n in range(5, 9)]
             + [(4099, 130, n) for n in range(5, 9)] + [(14335, 128, 7), (14335, 128, 8), (6145, 344, 8)])
    for mode in MODES:
        for rows, blocks, n in tail2:
            cases.append(Case("tail2", rows, blocks, n, mode))
    # the classes that miss the speed target, rows = 0..3 (mod 4) on each: rows of 2880 values (90 blocks) and of
    # 5152 and 5440 values (161 and 170 blocks), not a multiple of 256 (the unaligned path);
    # rows of 4096 values (128 blocks) with row counts of 8193 and 11010
    weak3 = ([(4096, 90, n) for n in range(5, 9)] + [(5121, 161, 6), (5121, 161, 8), (6146, 170, 7), (4099, 90, 8),
              (4099, 90, 5)] + [(8193, 128, 8), (11010, 128, 7)])
    for mode in MODES:
        for rows, blocks, n in weak3:
            cases.append(Case("weak3", rows, blocks, n, mode))
    # shapes no other group uses, on every form of the dispatch (rows >= 4096): register form
    # (rows of 4096 and 11008 values at 5..7 columns below 32M weights, 896-value rows), shared-memory
    # form (rows of 16384, 16640 = 16 steps + 8 blocks, and 18432 values at 5 and 6 columns), tensor-core
    # form (rows of 4096, 4352 = 4 steps + 8 blocks, 5120 and 14336 values; row counts = 1, 2, 3 mod 4
    # and 3 mod 16; 7 columns from 32M weights), and rows whose length is not a multiple of 256 values
    # at 7 and 8 columns (28, 90, 161, 163, 170 and 449 blocks: odd block counts leave every other row
    # 2 bytes off a 4-byte boundary; 449 blocks end in a step of 1 block); 1 and 4 columns as controls
    r4 = ([(6144, 128, n) for n in (5, 6, 7)] + [(4097, 344, 5), (4867, 28, 6)]
          + [(4101, 512, 5), (4103, 576, 6), (4098, 520, 5)]
          + [(12291, 128, 8), (4113, 160, 8), (4098, 136, 8), (4100, 448, 7), (16384, 128, 7)]
          + [(4864, 28, 8), (5123, 161, 8), (4100, 163, 8), (4097, 449, 7), (8195, 90, 8), (4101, 170, 7),
             (12289, 90, 7)]
          + [(4101, 161, 1), (4101, 161, 4)])
    for mode in MODES:
        for rows, blocks, n in r4:
            cases.append(Case("r4", rows, blocks, n, mode))
    # the timed shapes, every column count
    for mode in MODES:
        for rows, blocks in ((4096, 128), (4096, 448), (14336, 128), (5120, 544)):
            for n in range(1, 9):
                cases.append(Case("perfshape", rows, blocks, n, mode))
    return cases


def kernel_path(rows: int, blocks: int, n: int, min_rows: int, ua_mma: bool = False) -> str:
    """Which kernel the patch runs for a MUL_MAT of this shape (data from ggml's allocator, so 16-byte
    aligned): the dispatch of mul_mat_vec_q4_0_q8_1_rt_switch, for labelling only. ua_mma: the dispatch
    sends rows of any length to the tensor-core form (4-byte copies where rows are not 16-byte aligned)."""
    if n < 5 or rows < min_rows:
        return "unpatched"
    aligned = blocks % 8 == 0
    big = n == 8 or (n == 7 and rows * blocks * QK >= 4096 * 8192)
    if aligned and big:
        return "tensor-core"
    if ua_mma and big:
        return "tensor-core-4B"
    if aligned and n <= 6 and blocks * QK >= 16384:
        return "shared-mem"
    return "registers"


def make_weights(rng: np.random.Generator, rows: int, blocks: int, mode: str):
    """Returns (raw q4_0 bytes, nibbles uint8 [rows, blocks, 32], scales float64 [rows, blocks])."""
    if mode == "edges":
        nib = np.where(rng.random((rows, blocks, QK)) < 0.5, 0, 15).astype(np.uint8)
    else:
        nib = rng.integers(0, 16, size=(rows, blocks, QK), dtype=np.uint8)
    if mode == "scales":
        mag = 10.0 ** rng.uniform(-4.0, 3.0, size=(rows, blocks))
        d = (mag * np.where(rng.random((rows, blocks)) < 0.5, -1.0, 1.0)).astype(np.float16)
    else:
        d = (rng.standard_normal((rows, blocks)) * 0.02).astype(np.float16)
    raw = np.empty((rows, blocks, 18), dtype=np.uint8)
    raw[:, :, 0:2] = d.reshape(rows, blocks, 1).view(np.uint8)
    raw[:, :, 2:18] = nib[:, :, :16] | (nib[:, :, 16:] << 4)
    return raw.tobytes(), nib, d.astype(np.float64)


def make_activations(rng: np.random.Generator, k: int, n: int, mode: str, zero_col: int | None = None) -> np.ndarray:
    """float32 [n, k]: column after column, as the harness expects."""
    if mode == "saturated":
        x = np.where(rng.random((n, k)) < 0.5, -50.0, 50.0).astype(np.float32)
        x[rng.integers(0, n) if zero_col is None else min(zero_col, n - 1), :] = 0.0
        return x
    return rng.standard_normal((n, k)).astype(np.float32)


def _half(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float16).astype(np.float64)


def references(nib: np.ndarray, d_w: np.ndarray, x: np.ndarray):
    """Float64 references and tolerances, all [n, rows]:
    ref64, bound64: exact product of the given inputs, and the worst-case error of q8_1
                    activations against it;
    refq, tolq:     exact product after the device's q8_1 quantization of the activations,
                    and the float32 rounding the kernel may add to it (plus the outputs of blocks
                    whose q8_1 rounding sits so close to a tie that the device's approximate
                    division may round the other way)."""
    rows, blocks, _ = nib.shape
    n = x.shape[0]
    nibf = nib.astype(np.float64)
    adw = np.abs(d_w)
    wq = (nibf * d_w[:, :, None]).reshape(rows, blocks * QK)       # d_w * q_w, q_w in 0..15
    xd = x.astype(np.float64)

    # q8_1 as the device does it: per block of 32, d = amax/127 in float32, q = round(x/d) (half
    # away from zero), d and s = sum(x) stored as fp16
    xb = x.reshape(n, blocks, QK)
    xb64 = xb.astype(np.float64)
    amax = np.abs(xb).max(axis=2)
    d32 = (amax / np.float32(127.0)).astype(np.float32)
    d64 = d32.astype(np.float64)
    dh = _half(d32)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(d64[:, :, None] > 0, xb64 / d64[:, :, None], 0.0)
    q = np.sign(v) * np.floor(np.abs(v) + 0.5)
    s64 = xb64.sum(axis=2)
    sabs = np.abs(xb64).sum(axis=2)
    sh = _half(xb.sum(axis=2, dtype=np.float32))

    # what approximate division and another summation order may change
    fr = np.abs(v) - np.floor(np.abs(v))
    dq = (np.abs(fr - 0.5) <= np.abs(v) * 2.0 ** -20 + 1e-30).astype(np.float64)
    ddh = np.maximum(np.abs(_half(d64 * (1 - 2.0 ** -21)) - dh), np.abs(_half(d64 * (1 + 2.0 ** -21)) - dh))
    dsh = np.maximum(np.abs(_half(s64 - 2.0 ** -19 * sabs) - sh), np.abs(_half(s64 + 2.0 ** -19 * sabs) - sh))

    qd = (q * dh[:, :, None]).reshape(n, blocks * QK)
    # two passes over the big weight matrices: sum(d_w q_w x), sum(d_w q_w q d_h), and their
    # absolute counterparts; the -8 d_w parts go through the per-block sums
    prod = wq @ np.concatenate([xd, qd]).T
    prod_abs = np.abs(wq) @ np.concatenate([np.abs(qd), (np.abs(q) * ddh[:, :, None]).reshape(n, blocks * QK),
                                            (dq * dh[:, :, None]).reshape(n, blocks * QK)]).T
    blk = d_w @ np.concatenate([s64, sh]).T
    blk_abs = adw @ np.concatenate([np.abs(sh), dsh]).T
    ref64 = (prod[:, :n] - 8.0 * blk[:, :n]).T
    refq = prod[:, n:] - 8.0 * blk[:, n:]
    mag = prod_abs[:, :n] + 8.0 * blk_abs[:, :n]
    allow = prod_abs[:, n:2 * n] + prod_abs[:, 2 * n:] + 8.0 * blk_abs[:, n:]
    tolq = (math.ceil(blocks / 32) + 10) * 2.0 ** -23 * mag + allow + 1e-30

    # worst case of the whole q8_1 step against the exact product
    e_x = 0.5001 * d64 + 127.0 * np.abs(dh - d64)
    e_s = np.abs(sh - s64) + 2.0 ** -19 * sabs
    quant = (adw * nibf.sum(axis=2)) @ e_x.T + 8.0 * (adw @ e_s.T)
    bound64 = 1.01 * quant + tolq
    return ref64, bound64.T, refq.T, tolq.T


def parse_build(spec: str):
    name, _, rest = spec.partition("=")
    parts = rest.split(",")
    libdir = parts[0]
    env = {}
    for p in parts[1:]:
        key, _, val = p.partition("=")
        env[key] = val
    if not name or not libdir:
        raise SystemExit(f"bad --build {spec!r}: want NAME=LIBDIR[,VAR=VALUE...]")
    return name, libdir, env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harness", required=True)
    ap.add_argument("--build", action="append", required=True,
                    help="NAME=LIBDIR[,VAR=VALUE...]; first is the reference")
    ap.add_argument("--backend", default="CUDA0")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--min-rows", type=int, default=4096,
                    help="only labels which path a case takes: the patch's MMVQ_Q4_0_RT_MIN_ROWS "
                         "(0 for builds without it)")
    ap.add_argument("--q8-model", choices=("q8_1", "none"), default="q8_1",
                    help="activation quantization to emulate for the tight check (none: backends that use another)")
    ap.add_argument("--ua-mma", action="store_true",
                    help="only labels: the dispatch sends unaligned rows to the tensor-core form (a candidate's)")
    ap.add_argument("--groups", default="base40,oddrows,tailrows,tail2,weak3,r4,perfshape")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--table", default=None, help="also write the table (markdown) here")
    args = ap.parse_args()

    seed = args.seed if args.seed is not None else secrets.randbits(32)
    print(f"seed {seed}")
    builds = [parse_build(b) for b in args.build]
    groups = set(args.groups.split(","))
    cases = [c for c in build_cases() if c.group in groups]

    tmp = tempfile.TemporaryDirectory(dir=args.workdir)
    work = Path(tmp.name)
    rng = np.random.default_rng(seed)

    manifest_lines = {name: [] for name, _, _ in builds}
    refs = {}
    # perfshape cases of one shape and mode share weights and an 8-column activation set; a case
    # with n columns uses the first n (its references are the first n rows of the set's)
    shared: dict = {}
    for ci, c in enumerate(cases):
        key = (c.rows, c.blocks, c.mode) if c.group == "perfshape" else ("case", ci)
        if key not in shared:
            shared.clear()  # one set alive at a time
            ncols_set = 8 if c.group == "perfshape" else c.ncols
            raw, nib, d_w = make_weights(rng, c.rows, c.blocks, c.mode)
            x = make_activations(rng, c.k, ncols_set, c.mode, zero_col=1 if c.group == "perfshape" else None)
            wfile, xfile = work / f"w{ci}.bin", work / f"x{ci}.bin"
            wfile.write_bytes(raw)
            xfile.write_bytes(x.tobytes())
            shared[key] = (wfile, xfile, references(nib, d_w, x))
            del nib, d_w, x
        wfile, xfile, r = shared[key]
        refs[ci] = tuple(a[:c.ncols] for a in r)
        for name, _, _ in builds:
            manifest_lines[name].append(f"{c.name} {c.rows} {c.k} {c.ncols} {wfile} {xfile} "
                                        f"{work / f'o{ci}-{name}.bin'}")

    for name, libdir, env in builds:
        mpath = work / f"manifest-{name}.txt"
        mpath.write_text("\n".join(manifest_lines[name]) + "\n")
        run_env = dict(os.environ)
        run_env.update(env)
        run_env["LD_LIBRARY_PATH"] = libdir + (":" + run_env["LD_LIBRARY_PATH"]
                                               if run_env.get("LD_LIBRARY_PATH") else "")
        r = subprocess.run([args.harness, "check", args.backend, str(mpath)], env=run_env, text=True,
                           capture_output=True)
        for out_line in r.stdout.splitlines():
            print(f"[{name}] {out_line}")
        if r.returncode != 0:
            sys.stderr.write(r.stderr)
            print(f"FAIL: harness exited {r.returncode} for build {name}")
            return 1

    ref_name = builds[0][0]
    header = ["case", "rows", "k", "n", "mode", "path"]
    for name, _, _ in builds[1:]:
        header.append(f"{name}: bit-diff")
    for name, _, _ in builds:
        header.append(f"{name}: err/tol q8_1")
    header.append(f"{ref_name}: err/bound f64")
    header.append(f"{ref_name}: rel L2 f64")
    rows_out = []
    failures = 0
    for ci, c in enumerate(cases):
        ref64, bound64, refq, tolq = refs[ci]
        outs = {}
        for name, _, _ in builds:
            outs[name] = np.fromfile(work / f"o{ci}-{name}.bin", dtype=np.float32).reshape(c.ncols, c.rows)
        path = kernel_path(c.rows, c.blocks, c.ncols, args.min_rows, args.ua_mma)
        row = [c.group, str(c.rows), str(c.k), str(c.ncols), c.mode, path]
        base_bits = outs[ref_name].view(np.uint32)
        for name, _, _ in builds[1:]:
            ndiff = int(np.count_nonzero(outs[name].view(np.uint32) != base_bits))
            failures += ndiff != 0
            row.append(str(ndiff))
        for name, _, _ in builds:
            o = outs[name].astype(np.float64)
            if not np.all(np.isfinite(o)):
                failures += 1
                row.append("NaN/unwritten")
                continue
            if args.q8_model == "q8_1":
                ratio = float(np.max(np.abs(o - refq) / tolq))
                failures += not (ratio <= 1.0)
                row.append(f"{ratio:.3g}")
            else:
                row.append("-")
        o = outs[ref_name].astype(np.float64)
        ratio = float(np.max(np.abs(o - ref64) / bound64)) if np.all(np.isfinite(o)) else float("nan")
        failures += not (ratio <= 1.0)
        row.append(f"{ratio:.3g}")
        den = float(np.linalg.norm(ref64))
        row.append(f"{(np.linalg.norm(o - ref64) / den) if den > 0 else float(np.linalg.norm(o)):.2e}")
        rows_out.append(row)

    table = md_table(header, rows_out)
    print(table)
    verdict = (f"{len(cases)} cases x {len(builds)} builds, seed {seed}: "
               + ("all bit-identical to " + ref_name + " and within bound" if failures == 0
                  else f"{failures} FAILURES"))
    print(verdict)
    if args.table:
        Path(args.table).write_text(f"seed {seed}\n\n{table}\n\n{verdict}\n")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
