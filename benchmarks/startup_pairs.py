"""Start-up CPU time of the quick commands, two source trees side by side.

Runs ``python -m onebit_build ARGS`` from each tree in turn (the order swapped every round,
so a drift in the machine's load touches both), and takes the child's user + system CPU time
from ``resource.getrusage``. Each tree runs as its own project (its working folder) with
``PYTHONPATH`` pointing at it, and one unmeasured run first, so that a cache the tool keeps is
warm, as it is for a user after the first run.

    python benchmarks/startup_pairs.py --old /path/to/old --new . --rounds 7

``--bytecode`` writes and reads compiled modules under a temporary folder
(``PYTHONPYCACHEPREFIX``), as an installed package has them; without it the environment
decides (with ``PYTHONDONTWRITEBYTECODE`` set, every module is compiled at each start).
Prints the median and the spread per command and tree, and the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

COMMANDS = (("--help",), ("--version",), ("recipes",), ("completion", "bash"), ("completion", "zsh"),
            ("completion", "fish"))


def cpu_of(tree: Path, args: tuple[str, ...], env: dict[str, str]) -> float:
    """User + system CPU seconds of one run of the tool from ``tree``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([sys.executable, "-m", "onebit_build", *args], cwd=tree, capture_output=True,
                       env={**env, "PYTHONPATH": str(tree)}, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{tree}: onebit-build {' '.join(args)} failed: {r.stderr.decode()[-500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(trees: dict[str, Path], rounds: int, env: dict[str, str],
            commands: tuple[tuple[str, ...], ...] = COMMANDS) -> dict[str, dict[str, list[float]]]:
    times: dict[str, dict[str, list[float]]] = {" ".join(a): {k: [] for k in trees} for a in commands}
    for args in commands:
        for tree in trees.values():
            cpu_of(tree, args, env)  # warms the tool's own caches and the file system's
    for i in range(rounds):
        order = list(trees.items()) if i % 2 == 0 else list(reversed(trees.items()))
        for args in commands:
            for label, tree in order:
                times[" ".join(args)][label].append(cpu_of(tree, args, env))
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, required=True)
    ap.add_argument("--new", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--bytecode", action="store_true", help="compiled modules kept under a temporary folder")
    ap.add_argument("--json", type=Path, help="also write the raw times here")
    ap.add_argument("--command", action="append", choices=[" ".join(c) for c in COMMANDS],
                    help="measure only this command (repeatable; default: all)")
    a = ap.parse_args()
    commands = tuple(c for c in COMMANDS if a.command is None or " ".join(c) in a.command)
    trees = {"old": a.old.resolve(), "new": a.new.resolve()}
    with tempfile.TemporaryDirectory(prefix="startup-pairs-") as tmp:
        env = {**os.environ, "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
        if a.bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pyc")
        load_before = os.getloadavg()
        times = measure(trees, a.rounds, env, commands)
        load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f} {load_before[1]:.2f}, after {load_after[0]:.2f}"
          f" {load_after[1]:.2f}; {a.rounds} rounds; bytecode {'kept' if a.bytecode else 'as the environment says'}")
    print(f"{'command':<18} {'old median':>10} {'(min-max)':>13} {'new median':>10} {'(min-max)':>13}")
    for cmd, by in times.items():
        cells = [f"{statistics.median(v):>10.3f} {f'({min(v):.2f}-{max(v):.2f})':>13}" for v in by.values()]
        print(f"{cmd:<18} {' '.join(cells)}")
    if a.json:
        a.json.write_text(json.dumps({"load_before": load_before, "load_after": load_after, "times": times}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
