#!/usr/bin/env python3
"""Run one job of a GitHub workflow here, step by step and in order, in a fresh Debian root as
a runner would: a user that is not root, with passwordless sudo, and the ``GITHUB_*`` and
``RUNNER_*`` variables a step reads pointing at local folders.

    sudo python3 benchmarks/workflow_in_root.py --job debian --root /var/tmp/d12 [--suite bookworm]
    python3 benchmarks/workflow_in_root.py --job debian --dry-run

The root is made with ``debootstrap --variant=minbase`` when the folder does not exist. Each
``run:`` step runs with ``bash --noprofile --norc -eo pipefail`` (a job's ``shell: bash``), its
``${{ env.X }}`` and ``${{ runner.* }}`` expressions filled in; ``GITHUB_ENV`` lines carry to
later steps. ``actions/checkout`` is a copy of this checkout's committed tree; the other
actions (cache, upload, setup) are GitHub services and are skipped, each with a line. Needs
root (chroot, mounts). Exit: 0 when every step passed, else the failed step's code.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / ".github" / "workflows" / "ci.yml"
MIRROR = "http://deb.debian.org/debian"
USER = "runner"
HOME = f"/home/{USER}"
WORK = f"{HOME}/work/repo"  # GITHUB_WORKSPACE inside the root
TEMP = f"{HOME}/work/_temp"  # RUNNER_TEMP
# Where this machine's clients find its certificate authorities (paths that exist in the root too).
CARRIED_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT")
_EXPR = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")


def expand(text: str, env: dict[str, str]) -> str:
    """The step's text with ``${{ env.X }}``, ``${{ runner.os }}`` and ``${{ runner.temp }}``
    filled in; ValueError for any other expression (this runner cannot know it). Pure."""
    def one(m: re.Match) -> str:
        expr = m.group(1)
        if expr.startswith("env."):
            return env.get(expr[4:], "")
        if expr in ("runner.os", "runner.temp"):
            return {"runner.os": "Linux", "runner.temp": TEMP}[expr]
        raise ValueError(f"cannot evaluate ${{{{ {expr} }}}} here")
    return _EXPR.sub(one, text)


def plan(job: dict) -> list[tuple[str, str, dict]]:
    """(what, name, step) per step, in order: what is "run", "checkout" or "skip". Pure."""
    out = []
    for i, step in enumerate(job.get("steps", [])):
        name = step.get("name") or step.get("uses") or f"step {i + 1}"
        uses = str(step.get("uses", ""))
        if "run" in step:
            out.append(("run", name, step))
        elif uses.startswith("actions/checkout@"):
            out.append(("checkout", name, step))
        else:
            out.append(("skip", name, step))
    return out


def read_env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines and ``NAME<<DELIM`` blocks of a GITHUB_ENV file. Pure but for the read."""
    found: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and "=" not in line.split("<<", 1)[0]:
            name, delim = line.split("<<", 1)
            end = lines.index(delim, i + 1)
            found[name] = "\n".join(lines[i + 1:end])
            i = end + 1
            continue
        if "=" in line:
            name, value = line.split("=", 1)
            found[name] = value
        i += 1
    return found


def sh(*argv: str, **kw) -> subprocess.CompletedProcess:
    print("+ " + shlex.join(argv), flush=True)
    return subprocess.run(argv, **kw)


def make_root(root: Path, suite: str) -> None:
    """A minbase root with sudo and a user of its own that may use it without a password."""
    if not root.exists():
        sh("debootstrap", "--variant=minbase", suite, str(root), MIRROR, check=True)
    shutil.copy2("/etc/resolv.conf", root / "etc" / "resolv.conf")
    host = os.uname().nodename
    (root / "etc" / "hosts").write_text(f"127.0.0.1 localhost {host}\n::1 localhost ip6-localhost\n")
    carry_trust(root)
    with mounted(root):
        sh("chroot", str(root), "apt-get", "install", "-y", "-qq", "--no-install-recommends", "sudo", check=True)
        if sh("chroot", str(root), "id", USER, capture_output=True).returncode != 0:
            sh("chroot", str(root), "useradd", "--create-home", "--shell", "/bin/bash", USER, check=True)
    (root / "etc" / "sudoers.d" / USER).write_text(f"{USER} ALL=(ALL) NOPASSWD:ALL\n")
    (root / "etc" / "sudoers.d" / USER).chmod(0o440)


def carry_trust(root: Path) -> None:
    """What this machine's network asks of a client, as a runner's image would have it: the
    certificate authorities it adds (``/usr/local/share/ca-certificates``) and the system-wide
    pip configuration. Their names are printed, never their contents."""
    local = Path("/usr/local/share/ca-certificates")
    dest = root / "usr" / "local" / "share" / "ca-certificates"
    dest.mkdir(parents=True, exist_ok=True)
    for crt in sorted(local.glob("*.crt")) if local.is_dir() else []:
        shutil.copy2(crt, dest / crt.name)
        print(f"carried {crt}", flush=True)
    if Path("/etc/pip.conf").is_file():
        shutil.copy2("/etc/pip.conf", root / "etc" / "pip.conf")
        print("carried /etc/pip.conf", flush=True)
    if (root / "usr" / "sbin" / "update-ca-certificates").exists():
        sh("chroot", str(root), "update-ca-certificates", capture_output=True)


class mounted:
    """/proc, /dev and /sys of this machine inside the root while in the block."""

    def __init__(self, root: Path):
        self.points = [root / "proc", root / "dev", root / "sys"]

    def __enter__(self):
        sh("mount", "-t", "proc", "proc", str(self.points[0]), check=True)
        sh("mount", "--rbind", "/dev", str(self.points[1]), check=True)
        sh("mount", "--rbind", "/sys", str(self.points[2]), check=True)
        return self

    def __exit__(self, *exc):
        for p in reversed(self.points):
            subprocess.run(["umount", "-R", "-l", str(p)], check=False)


def checkout(root: Path) -> None:
    """This checkout's committed tree (HEAD), owned by the runner's user, as actions/checkout leaves it."""
    dest = root / WORK.lstrip("/")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    subprocess.run(["chroot", str(root), "chown", "-R", f"{USER}:{USER}", f"{HOME}/work"], check=True)


def run_step(root: Path, name: str, step: dict, env: dict[str, str], files: dict[str, str]) -> int:
    """One ``run:`` step as the runner's user; GITHUB_ENV's lines join ``env`` afterwards."""
    step_env = {**env, **{k: expand(str(v), env) for k, v in (step.get("env") or {}).items()}}
    script = root / TEMP.lstrip("/") / "step.sh"
    script.write_text(expand(str(step["run"]), step_env))
    for f in files.values():
        (root / f.lstrip("/")).touch()
    subprocess.run(["chroot", str(root), "chown", "-R", f"{USER}:{USER}", TEMP], check=True)
    argv = ["chroot", f"--userspec={USER}:{USER}", str(root), "/usr/bin/env", "-i",
            *(f"{k}={v}" for k, v in step_env.items()),
            "bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", f"cd {WORK} && . {TEMP}/step.sh"]
    t0 = time.monotonic()
    done = subprocess.run(argv)
    print(f"step {name!r}: exit {done.returncode} in {time.monotonic() - t0:.1f} s", flush=True)
    env.update(read_env_file(root / files["GITHUB_ENV"].lstrip("/")))
    return done.returncode


def base_env(job: dict) -> tuple[dict[str, str], dict[str, str]]:
    files = {k: f"{TEMP}/{k.lower()}" for k in ("GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_PATH")}
    env = {"HOME": HOME, "USER": USER, "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "LANG": "C.UTF-8", "CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": WORK,
           "GITHUB_EVENT_NAME": "pull_request", "RUNNER_TEMP": TEMP, "RUNNER_OS": "Linux", **files}
    env.update({k: v for k, v in os.environ.items() if k in CARRIED_VARIABLES})
    env.update({k: str(v) for k, v in (job.get("env") or {}).items()})
    return env, files


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workflow", type=Path, default=WORKFLOW)
    ap.add_argument("--job", default="debian")
    ap.add_argument("--root", type=Path, help="the Debian root folder (made when missing)")
    ap.add_argument("--suite", default="bookworm")
    ap.add_argument("--dry-run", action="store_true", help="print the steps and what each would do")
    a = ap.parse_args()
    job = yaml.safe_load(a.workflow.read_text())["jobs"][a.job]
    env, files = base_env(job)
    steps = plan(job)
    for what, name, step in steps:
        text = expand(str(step.get("run", "")), env) if what == "run" else step.get("uses", "")
        print(f"{what:<8} {name}" + (f": {text.splitlines()[0] if text else ''}" if a.dry_run else ""))
    if a.dry_run:
        return 0
    if a.root is None or os.geteuid() != 0:
        print("a real run needs --root DIR and root (chroot, mounts)", file=sys.stderr)
        return 2
    make_root(a.root, a.suite)
    for folder in (TEMP, WORK):  # as a runner has them before the first step
        (a.root / folder.lstrip("/")).mkdir(parents=True, exist_ok=True)
    with mounted(a.root):
        for what, name, step in steps:
            if what == "skip":
                print(f"step {name!r}: skipped here (a GitHub service)", flush=True)
            elif what == "checkout":
                checkout(a.root)
            elif (rc := run_step(a.root, name, step, env, files)) != 0:
                return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
