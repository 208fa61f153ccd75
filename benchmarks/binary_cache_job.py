"""The whole default job taken from a binary cache, from empty caches but the model.

Starts a local OCI registry (Debian's ``docker-registry``, on a free port of 127.0.0.1, its
store in ``--out``), publishes the default build of ``--from-workspace`` to it (that build is
reused when up to date, and verified), then runs ``onebit-build all --binary-cache ...``
``--runs`` times, each in a new workspace with ``XDG_CACHE_HOME`` and ``PIP_CACHE_DIR`` in new
folders and the model copied into the workspace beforehand. Stops the registry at the end.

    python benchmarks/binary_cache_job.py --out /tmp/binary-cache-job --runs 3

Writes ``<out>/binary-cache-job.json`` (wall time and every stage's time of each run, the load
average before it, the verdict) and prints one line per run. ``--dry-run`` prints the registry's,
the publish's and each run's command (JSON) and starts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

STEP = re.compile(r"^(binary|fetch|patch|build|verify|model|smoke)\s+ok \(([\d.]+) s\)", re.M)
MODEL = "gemma-3-270m-q4_k_m.gguf"
TOOL = [sys.executable, "-m", "onebit_build"]  # the tool of this interpreter (a checkout's, with PYTHONPATH)


def registry_argv(config: Path) -> list[str]:
    return ["docker-registry", "serve", str(config)]


def publish_argv(src: Path, ref: str) -> list[str]:
    return [*TOOL, "--workspace", str(src), "publish", ref]


def run_argv(ref: str) -> list[str]:
    return [*TOOL, "all", "--binary-cache", ref]


def start_registry(out: Path) -> tuple[subprocess.Popen, int]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (out / "config.yml").write_text(f"version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n"
                                    f"storage:\n  filesystem:\n    rootdirectory: {out / 'store'}\n"
                                    f"http:\n  addr: 127.0.0.1:{port}\n  secret: benchmark-only\n")
    proc = subprocess.Popen(registry_argv(out / "config.yml"), stdout=subprocess.DEVNULL,
                            stderr=open(out / "registry.log", "w"), start_new_session=True)
    time.sleep(1.0)
    return proc, port


def one_run(base: Path, ref: str, model: Path) -> dict:
    env = dict(os.environ)
    for var, sub in (("XDG_CACHE_HOME", "cache"), ("PIP_CACHE_DIR", "pip-cache")):
        (base / sub).mkdir(parents=True)
        env[var] = str(base / sub)
    env.pop("ONEBIT_WORKSPACE", None)
    ws = base / "cache" / "onebit-build"
    (ws / "models").mkdir(parents=True)
    shutil.copyfile(model, ws / "models" / MODEL)
    log = base / "onebit-build.log"
    before, t0 = os.getloadavg()[0], time.monotonic()
    with log.open("w") as fh:
        rc = subprocess.run(run_argv(ref), env=env, stdout=fh,
                            stderr=subprocess.STDOUT, check=False).returncode
    wall = time.monotonic() - t0
    text = log.read_text()
    if rc != 0:
        sys.exit(f"onebit-build all failed (rc {rc}); see {log}")
    return {"wall_s": round(wall, 1), "steps_s": {m.group(1): float(m.group(2)) for m in STEP.finditer(text)},
            "load_before": round(before, 2), "compiled": (ws / "build").exists(),
            "verified": "(verify VERIFIED)" in text, "log": str(log)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="a new folder for the registry, the runs and the JSON")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--from-workspace", type=Path, default=None,
                    help="the workspace whose default build is published (default: the user's)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands (JSON), start and run nothing")
    args = ap.parse_args()
    src = args.from_workspace or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "onebit-build"
    model = src / "models" / MODEL
    if args.dry_run:
        ref = "oci://127.0.0.1:PORT/builds"
        print(json.dumps({"registry": registry_argv(args.out / "config.yml"), "publish": publish_argv(src, ref),
                          "runs": [run_argv(ref)] * args.runs, "model": str(model)}, indent=2))
        return 0
    args.out.mkdir(parents=True)
    if not model.is_file():
        sys.exit(f"no {MODEL} in {src}/models: run 'onebit-build model pull' there first")
    proc, port = start_registry(args.out)
    try:
        ref = f"oci://127.0.0.1:{port}/builds"
        t0 = time.monotonic()
        subprocess.run(publish_argv(src, ref), check=True)
        runs = []
        for i in range(1, args.runs + 1):
            runs.append(one_run(args.out / f"run-{i}", ref, model))
            print(f"run {i}: {runs[-1]['wall_s']} s, stages {runs[-1]['steps_s']}, load {runs[-1]['load_before']}")
        doc = {"publish_s": round(time.monotonic() - t0 - sum(r["wall_s"] for r in runs), 1), "runs": runs}
        (args.out / "binary-cache-job.json").write_text(json.dumps(doc, indent=2) + "\n")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
