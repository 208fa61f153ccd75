#!/usr/bin/env python3
"""Resource audit of the row-tiled Q4_0 kernels: registers, stack frame, shared and local memory per
instantiation from a library's cubins (cuobjdump --dump-resource-usage), joined with the spill counts
that ptxas printed (-Xptxas -v) when the same mmvq.cu was compiled. Upstream's Q4_0 mul_mat_vec_q
instances for 5..8 columns are listed too, for comparison. Writes a markdown table; exit 1 when a
row-tiled kernel spills or uses local memory.

usage: resource_audit.py LIBGGML_CUDA PTXAS_LOG OUT_MD
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from mdtable import md_table

KERNELS = re.compile(r"mul_mat_vec_q4_0_q8_1_rt[sm]?I|mul_mat_vec_qIL9ggml_type2ELi[5-8]ELb0ELb0ELb0E")


def demangle(names: list[str]) -> dict[str, str]:
    if not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def main() -> int:
    lib, ptxas_log, out_md = sys.argv[1:4]
    usage = subprocess.run(["cuobjdump", "--dump-resource-usage", lib], capture_output=True,
                           text=True, check=True).stdout
    res: dict[str, dict[str, str]] = {}
    lines = usage.splitlines()
    for i, line in enumerate(lines):
        m = re.search(r"Function (\S+):", line)
        if m and KERNELS.search(m.group(1)) and i + 1 < len(lines):
            res[m.group(1)] = dict(re.findall(r"(\w+):(\d+)", lines[i + 1]))
    spills: dict[str, tuple[str, str, str]] = {}
    cur = None
    for line in open(ptxas_log, errors="replace"):
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur = m.group(1)
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            spills[cur] = m.groups()
    names = sorted(res)
    dem = demangle(names)
    rows = []
    bad = 0
    for n in names:
        r = res[n]
        st, ss, sl = spills.get(n, ("?", "?", "?"))
        tiled = "q4_0_q8_1_rt" in n
        if tiled and (r.get("LOCAL", "0") != "0" or r.get("STACK", "0") != "0" or ss not in ("0",) or sl not in ("0",)):
            bad += 1
        short = re.match(r"(?:void )?(.*?>)\(", dem[n])
        rows.append([short.group(1) if short else dem[n], r.get("REG", "?"), r.get("STACK", "?"), ss, sl,
                     r.get("SHARED", "?"), r.get("LOCAL", "?")])
    table = md_table(["kernel", "registers", "stack frame (bytes)", "spill stores (bytes)", "spill loads (bytes)",
                      "static shared (bytes)", "local (bytes)"], rows)
    verdict = (f"{sum('q4_0_q8_1_rt' in n for n in names)} row-tiled instantiations: "
               + ("no spills, no stack, no local memory" if bad == 0 else f"{bad} with spills, stack or local memory"))
    open(out_md, "w").write(table + "\n\n" + verdict + "\n")
    print(table)
    print(verdict)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
