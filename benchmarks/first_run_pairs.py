"""First run against a plain CMake build, in interleaved pairs, from empty caches.

Each pair runs ``onebit-build`` (the whole default job: fetch, patch, build, verify, model,
smoke, report) from empty caches and a new workspace, and a plain ``cmake`` configure and
build of the same patched tree with the same defines and no compiler cache. Odd pairs run
the tool first, even pairs the plain build first, so a drift in the machine's load touches
both sides. The plain build's ``llama-server`` must have the same sha256 as the tool's.

    python benchmarks/first_run_pairs.py --out /tmp/first-run --pairs 3

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
from pathlib import Path

STEP = re.compile(r"^(fetch|patch|build|verify|model|smoke)\s+ok \(([\d.]+) s\)", re.M)
LAUNCHER = re.compile(r"^-DCMAKE_\w+_COMPILER_LAUNCHER=")


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
        rc = subprocess.run(["onebit-build"], env=env, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.monotonic() - t0
    text = log.read_text()
    if rc != 0:
        sys.exit(f"onebit-build failed (rc {rc}); see {log}")
    steps = {m.group(1): float(m.group(2)) for m in STEP.finditer(text)}
    server = next((base / "cache" / "onebit-build" / "build").glob("default-llama-*/bin/llama-server"))
    hits = re.search(r"(\d+)/(\d+) compiler cache hits", text)
    return {"wall_s": round(wall, 1), "steps_s": steps, "load_before": round(before, 2),
            "cache_hits": hits.group(0) if hits else None, "sha256": sha256(server), "log": str(log)}


def plan_configure(env: dict[str, str], workspace: Path) -> list[str]:
    """The tool's own configure command for the default recipe, as its plan prints it."""
    out = subprocess.run(["onebit-build", "--workspace", str(workspace), "plan", "--json"], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["components"][0]["configure"]


def plain_argv(configure: list[str], tree: Path, old_tree: str, old_build: str, build: Path) -> list[str]:
    """The same configure with no compiler cache: the launchers dropped (ggml's own ccache
    search stays off, as the tool leaves it) and the paths moved to the plain build's."""
    argv = []
    for arg in configure:
        if LAUNCHER.match(arg):
            continue
        argv.append(arg.replace(old_build, str(build)).replace(old_tree, str(tree)))
    return argv


def plain_run(base: Path, tree: Path, configure: list[str]) -> dict:
    src, build = base / "src", base / "build"
    shutil.copytree(tree, src, symlinks=True)
    old_tree = configure[configure.index("-S") + 1]
    old_build = configure[configure.index("-B") + 1]
    argv = plain_argv(configure, src, old_tree, old_build, build)
    log = base / "plain.log"
    before, t0 = load(), time.monotonic()
    with log.open("w") as fh:
        subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, check=True)
        t1 = time.monotonic()
        subprocess.run(["cmake", "--build", str(build), "--target", "llama-server"], stdout=fh,
                       stderr=subprocess.STDOUT, check=True)
    end = time.monotonic()
    return {"wall_s": round(end - t0, 1), "configure_s": round(t1 - t0, 1), "build_s": round(end - t1, 1),
            "load_before": round(before, 2), "sha256": sha256(build / "bin" / "llama-server"), "log": str(log)}


def prepare(out: Path) -> tuple[Path, list[str]]:
    """A patched tree made once by the tool (not timed) and its configure command."""
    base = out / "prep"
    env = fresh_env(base)
    ws = base / "ws"
    subprocess.run(["onebit-build", "--workspace", str(ws), "patch"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    configure = plan_configure(env, ws)
    return Path(configure[configure.index("-S") + 1]), configure


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
    args = ap.parse_args()
    args.out.mkdir(parents=True)
    tree, configure = prepare(args.out)
    pairs = []
    for i in range(1, args.pairs + 1):
        order = ("tool", "plain") if i % 2 else ("plain", "tool")
        pair: dict = {"pair": i, "order": list(order)}
        for side in order:
            base = args.out / f"{side}-{i}"
            base.mkdir()
            pair[side] = tool_run(base) if side == "tool" else plain_run(base, tree, configure)
            print(f"pair {i} {side:5} {pair[side]['wall_s']:7.1f} s  load {pair[side]['load_before']}", flush=True)
        pair["same_bytes"] = pair["tool"]["sha256"] == pair["plain"]["sha256"]
        pairs.append(pair)
    doc = {"schema": 1, "cpus": os.cpu_count(), "pairs": pairs, "summary": summary(pairs)}
    (args.out / "first-run-pairs.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["summary"], indent=2))
    return 0 if all(p["same_bytes"] for p in pairs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
