"""First run against a plain CMake build, in interleaved pairs, from empty caches.

Each pair runs ``onebit-build`` (the whole default job: fetch, patch, build, verify, model,
smoke, report) from empty caches and a new workspace, and a plain ``cmake`` configure and
build of the same patched tree with the same defines and no compiler cache. Odd pairs run
the tool first, even pairs the plain build first, so a drift in the machine's load touches
both sides. The plain build's ``llama-server`` must have the same sha256 as the tool's.

    python benchmarks/first_run_pairs.py --out /tmp/first-run --pairs 3

The plain side's configure is the tool's own (``plan --json`` with ``--compiler-cache none``): the
same arguments and the same ``CMakeInit.txt`` (loaded with ``-C``), the tool's folders replaced
by the plain build's. ``--dry-run`` prints a pair's commands and writes that file, fetching
nothing; tests/test_benchmarks.py runs it.

Writes ``<out>/first-run-pairs.json`` (every step's wall time, the load average before each
run, the median and spread of the differences) and prints a table. Needs the network for the
sdist and the model, as a first run does.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

STEP = re.compile(r"^(fetch|patch|build|verify|model|smoke)\s+ok \(([\d.]+) s\)", re.M)
TOOL = ["onebit-build"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load() -> float:
    return os.getloadavg()[0]


def fresh_env(base: Path) -> dict[str, str]:
    """The environment of a first run: every cache in a new folder below ``base``."""
    env = dict(os.environ)
    for var, sub in (("XDG_CACHE_HOME", "cache"), ("PIP_CACHE_DIR", "pip-cache")):
        (base / sub).mkdir(parents=True)
        env[var] = str(base / sub)
    env.pop("ONEBIT_WORKSPACE", None)
    return env


def tool_run(base: Path) -> dict:
    env = fresh_env(base)
    log = base / "onebit-build.log"
    before, t0 = load(), time.monotonic()
    with log.open("w") as fh:
        rc = subprocess.run(TOOL, env=env, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.monotonic() - t0
    text = log.read_text()
    if rc != 0:
        sys.exit(f"onebit-build failed (rc {rc}); see {log}")
    steps = {m.group(1): float(m.group(2)) for m in STEP.finditer(text)}
    server = next((base / "cache" / "onebit-build" / "build").glob("default-llama-*/bin/llama-server"))
    hits = re.search(r"(\d+)/(\d+) compiler cache hits", text)
    return {"wall_s": round(wall, 1), "steps_s": steps, "load_before": round(before, 2),
            "cache_hits": hits.group(0) if hits else None, "sha256": sha256(server), "log": str(log)}


def plan_component(env: dict[str, str], workspace: Path) -> dict:
    """The default recipe's component as the tool configures it with no compiler cache, as its
    plan prints it: the configure and build commands, the build folder and CMakeInit.txt's text."""
    out = subprocess.run([*TOOL, "--workspace", str(workspace), "--compiler-cache", "none", "plan", "--json"],
                         env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out)["components"][0]


@dataclass(frozen=True)
class Plain:
    """The plain side's commands: the tool's own, moved to the plain build's folders."""

    configure: list[str]
    init_cache: Path  # the file configure loads with -C
    init_text: str
    build: list[str]


def plain_side(comp: dict, tree: Path, build: Path) -> Plain:
    """The tool's configure (with the same CMakeInit.txt, loaded by ``-C``) and build of ``comp``,
    its source tree and build folder replaced by ``tree`` and ``build`` everywhere, the path maps
    of CMakeInit.txt included, so that the bytes come out the same."""
    old_tree = comp["configure"][comp["configure"].index("-S") + 1]
    old_build = comp["build_dir"]

    def moved(text: str) -> str:
        return text.replace(old_build, str(build)).replace(old_tree, str(tree))

    configure = [moved(a) for a in comp["configure"]]
    if "-C" not in configure or comp["init_cache"] is None:
        sys.exit("the tool's configure no longer loads an initial cache (-C): this script must follow it")
    init_cache = Path(configure[configure.index("-C") + 1])
    if init_cache.parent != build:
        sys.exit(f"the tool's initial cache {init_cache} is not in its build folder: this script must follow it")
    return Plain(configure=configure, init_cache=init_cache, init_text=moved(comp["init_cache"]),
                 build=[moved(a) for a in comp["build"]])


def lay_plain(comp: dict, base: Path) -> Plain:
    """The plain side's commands for ``base/src`` and ``base/build``, its CMakeInit.txt written."""
    plain = plain_side(comp, base / "src", base / "build")
    plain.init_cache.parent.mkdir(parents=True)
    plain.init_cache.write_text(plain.init_text)
    return plain


def plain_run(base: Path, tree: Path, comp: dict) -> dict:
    build = base / "build"
    shutil.copytree(tree, base / "src", symlinks=True)
    plain = lay_plain(comp, base)
    log = base / "plain.log"
    before, t0 = load(), time.monotonic()
    with log.open("w") as fh:
        subprocess.run(plain.configure, stdout=fh, stderr=subprocess.STDOUT, check=True)
        t1 = time.monotonic()
        subprocess.run(plain.build, stdout=fh, stderr=subprocess.STDOUT, check=True)
    end = time.monotonic()
    return {"wall_s": round(end - t0, 1), "configure_s": round(t1 - t0, 1), "build_s": round(end - t1, 1),
            "load_before": round(before, 2), "sha256": sha256(build / "bin" / "llama-server"), "log": str(log)}


def prepare(out: Path, *, patch: bool = True) -> tuple[Path, dict]:
    """A patched tree made once by the tool (not timed) and the component's plan. Without
    ``patch`` the tree is only planned (a dry run: nothing is fetched)."""
    base = out / "prep"
    env = fresh_env(base)
    ws = base / "ws"
    if patch:
        subprocess.run([*TOOL, "--workspace", str(ws), "patch"], env=env, check=True, stdout=subprocess.DEVNULL)
    comp = plan_component(env, ws)
    return Path(comp["configure"][comp["configure"].index("-S") + 1]), comp


def dry_run(out: Path) -> int:
    """Print the commands of one pair as JSON, run nothing but the tool's plan; the plain side's
    CMakeInit.txt is written where its configure loads it."""
    _, comp = prepare(out, patch=False)
    plain = lay_plain(comp, out / "plain-1")
    print(json.dumps({"tool": TOOL, "plain": {"configure": plain.configure, "init_cache": str(plain.init_cache),
                                              "build": plain.build}}, indent=2))
    return 0


def summary(pairs: list[dict]) -> dict:
    diffs = [p["tool"]["wall_s"] - p["plain"]["wall_s"] for p in pairs]
    return {"tool_minus_plain_s": diffs, "median_s": round(statistics.median(diffs), 1),
            "spread_s": [round(min(diffs), 1), round(max(diffs), 1)],
            "tool_median_s": statistics.median(p["tool"]["wall_s"] for p in pairs),
            "plain_median_s": statistics.median(p["plain"]["wall_s"] for p in pairs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="a new folder for the runs")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true",
                    help="print the commands of a pair (JSON) and write the plain side's CMakeInit.txt; fetch nothing")
    args = ap.parse_args()
    args.out.mkdir(parents=True)
    if args.dry_run:
        return dry_run(args.out)
    tree, comp = prepare(args.out)
    pairs = []
    for i in range(1, args.pairs + 1):
        order = ("tool", "plain") if i % 2 else ("plain", "tool")
        pair: dict = {"pair": i, "order": list(order)}
        for side in order:
            base = args.out / f"{side}-{i}"
            base.mkdir()
            pair[side] = tool_run(base) if side == "tool" else plain_run(base, tree, comp)
            print(f"pair {i} {side:5} {pair[side]['wall_s']:7.1f} s  load {pair[side]['load_before']}", flush=True)
        pair["same_bytes"] = pair["tool"]["sha256"] == pair["plain"]["sha256"]
        pairs.append(pair)
    doc = {"schema": 1, "cpus": os.cpu_count(), "pairs": pairs, "summary": summary(pairs)}
    (args.out / "first-run-pairs.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["summary"], indent=2))
    return 0 if all(p["same_bytes"] for p in pairs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
