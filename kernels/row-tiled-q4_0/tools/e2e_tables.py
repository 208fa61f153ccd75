"""Tables for h200_e2e.sh: greedy outputs of the unpatched and the patched build compared
sequence by sequence, and llama-batched-bench generation throughput side by side.

Reads WORKDIR/greedy-{unpatched,patched}-N.jsonl (greedy_batch output) and
WORKDIR/batched-{unpatched,patched}-R.jsonl (llama-batched-bench --output-format jsonl;
the matching lines of WORKDIR/logs/batched-*-R.log are read too, wherever the tool printed
them). Exits 1 when any greedy output differs or a file is missing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

BUILDS = ("unpatched", "patched")


def read_jsonl(path: Path) -> list[dict]:
    out = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def greedy_table(wd: Path, ns: list[int]) -> tuple[list[str], bool]:
    rows = ["| sequences (columns) | tokens per sequence | tokens identical | logits rows identical "
            "(hash) | sequence 0 text (start) |",
            "|---|---|---|---|---|"]
    ok = True
    for n in ns:
        a = read_jsonl(wd / f"greedy-unpatched-{n}.jsonl")
        b = read_jsonl(wd / f"greedy-patched-{n}.jsonl")
        if len(a) != n or len(b) != n:
            rows.append(f"| {n} | - | MISSING ({len(a)} / {len(b)} sequences) | - | - |")
            ok = False
            continue
        same_tok = sum(x["tokens"] == y["tokens"] for x, y in zip(a, b))
        same_hash = sum(x["logits_fnv1a"] == y["logits_fnv1a"] for x, y in zip(a, b))
        ok &= same_tok == n and same_hash == n
        text = a[0]["text"][:48].replace("|", "\\|").replace("\n", "\\n")
        rows.append(f"| {n} | {len(a[0]['tokens'])} | {same_tok}/{n} | {same_hash}/{n} | `{text}` |")
    return rows, ok


def batched(wd: Path, rounds: int) -> dict:
    res: dict = {b: {} for b in BUILDS}
    for b in BUILDS:
        for r in range(1, rounds + 1):
            lines = read_jsonl(wd / f"batched-{b}-{r}.jsonl") + read_jsonl(wd / "logs" / f"batched-{b}-{r}.log")
            seen = set()
            for d in lines:
                if "pl" not in d or d["pl"] in seen:
                    continue
                seen.add(d["pl"])
                res[b].setdefault(d["pl"], {"speed_tg": [], "speed_pp": []})
                res[b][d["pl"]]["speed_tg"].append(d["speed_tg"])
                res[b][d["pl"]]["speed_pp"].append(d["speed_pp"])
    return res


def batched_table(res: dict) -> list[str]:
    """Generation t/s per number of sequences: medians, the range over rounds of each build, and
    whether the patched build's slowest round beats the unpatched build's fastest ("outside spread")."""
    rows = ["| sequences | unpatched gen t/s (median) | patched gen t/s (median) | patched / unpatched | unpatched "
            "min..max | patched min..max | gain outside the round-to-round spread |",
            "|---|---|---|---|---|---|---|"]
    pls = sorted(set(res["unpatched"]) | set(res["patched"]))
    for pl in pls:
        u = res["unpatched"].get(pl, {}).get("speed_tg", [])
        p = res["patched"].get(pl, {}).get("speed_tg", [])
        if not u or not p:
            rows.append(f"| {pl} | - | - | - | - | - | missing |")
            continue
        mu, mp = statistics.median(u), statistics.median(p)
        outside = "yes" if min(p) > max(u) else ("no (slower)" if max(p) < min(u) else "no")
        rows.append(f"| {pl} | {mu:.1f} | {mp:.1f} | {mp / mu:.3f}x | {min(u):.0f}..{max(u):.0f} | "
                    f"{min(p):.0f}..{max(p):.0f} | {outside} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ns", default="1,2,3,4,5,6,7,8")
    ap.add_argument("--greedy", type=Path, required=True)
    ap.add_argument("--batched", type=Path, required=True)
    ap.add_argument("--json", type=Path, required=True)
    a = ap.parse_args(argv)
    ns = [int(x) for x in a.ns.split(",")]

    g_rows, g_ok = greedy_table(a.workdir, ns)
    a.greedy.write_text("\n".join(g_rows) + "\n")
    res = batched(a.workdir, a.rounds)
    b_rows = batched_table(res)
    a.batched.write_text("\n".join(b_rows) + "\n")
    a.json.write_text(json.dumps({"schema": 1, "rounds": a.rounds, "greedy_identical": g_ok,
                                  "batched": {b: {str(k): v for k, v in d.items()}
                                              for b, d in res.items()}}, indent=1) + "\n")
    print("\n".join(g_rows))
    print(f"greedy outputs: {'ALL IDENTICAL' if g_ok else 'DIFFER OR MISSING'}")
    print("\n".join(b_rows))
    return 0 if g_ok else 1


if __name__ == "__main__":
    sys.exit(main())
