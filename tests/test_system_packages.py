"""One list of system packages (system-packages.txt) for the set-up script the README and .ci/run
call (bootstrap.sh) and the GitHub workflow: each installs it with the same command, so a new
user who follows the README gets what CI has (and no test skips for a missing package)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LIST = REPO / "system-packages.txt"
INSTALL = "xargs -a system-packages.txt apt-get install -y --no-install-recommends"
# Programs the tests need from the system, and the package that brings each.
NEEDED = {"redis-server": "redis-server", "ccache": "ccache", "glslc": "glslc", "shellcheck": "shellcheck",
          "git": "git", "docker-registry": "docker-registry", "bwrap": "bubblewrap", "ip": "iproute2"}


def packages() -> list[str]:
    return LIST.read_text().split()


def install_lines(text: str) -> list[str]:
    """The lines of ``text`` that install packages with apt-get, as a user would type them:
    ``sudo`` and the quiet flags and redirections of scripts left out."""
    out = []
    for line in text.splitlines():
        if "apt-get install" not in line or line.lstrip().startswith("#"):
            continue
        line = line.split("run:", 1)[-1].split("&&")[-1]
        words = [w for w in line.split() if w not in ("sudo", "-qq", ">/dev/null")]
        out.append(" ".join(words))
    return out


def readme_setup() -> str:
    """The README's first shell block: the two commands a fresh machine needs."""
    text = (REPO / "README.md").read_text()
    start = text.index("```sh")
    return text[start:text.index("```", start + 5)]


def test_the_list_is_package_names_only():
    names = packages()
    assert names and len(names) == len(set(names))
    bad = [n for n in names if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", n)]
    assert not bad, f"not Debian package names: {bad}"
    assert {"redis-server", "ccache"} <= set(names)
    assert set(NEEDED.values()) <= set(names)


def after_checkout(workflow: Path) -> str:
    """The run: scripts of a workflow's jobs that come after the checkout (before it, the list
    cannot be read: a container job first installs what the checkout needs)."""
    import yaml

    out = []
    for job in yaml.safe_load(workflow.read_text())["jobs"].values():
        steps = job.get("steps", [])
        first = next((i for i, st in enumerate(steps) if str(st.get("uses", "")).startswith("actions/checkout@")), 0)
        out += [str(st["run"]) for st in steps[first:] if "run" in st]
    return "\n".join(out)


@pytest.mark.parametrize("where", ["bootstrap.sh", ".github/workflows/ci.yml"])
def test_every_setup_installs_the_list_with_the_same_command(where):
    text = (REPO / where).read_text() if where.endswith(".sh") else after_checkout(REPO / where)
    assert install_lines(text) == [INSTALL], f"{where}: {install_lines(text)}"


def test_before_the_checkout_only_what_the_checkout_needs_is_installed():
    import yaml

    steps = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())["jobs"]["debian"]["steps"]
    assert "actions/checkout@" in steps[1]["uses"]
    (line,) = [ln for ln in str(steps[0]["run"]).splitlines() if "apt-get install" in ln]
    assert line.split("--no-install-recommends")[1].split() == ["git", "ca-certificates", "sudo"], line


def test_the_readme_and_ci_set_up_through_the_script():
    """The README's two commands go through bootstrap.sh, and .ci/run runs the README's test
    command as it is written there."""
    commands = [line.strip() for line in readme_setup().splitlines()[1:] if line.strip()]
    commands = [line.split("#", 1)[0].strip() for line in commands if not line.startswith("#")]
    assert commands == ["./bootstrap.sh onebit-build", "./bootstrap.sh python -m pytest"], commands
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert commands[1] in ci


def test_install_lines_sees_a_second_package_source():
    """The check can fail: a setup that also installs a package by name is not the list."""
    text = "apt-get update\n" + INSTALL + "\nsudo apt-get install -y -qq extra-thing\n"
    assert install_lines(text) == [INSTALL, "apt-get install -y extra-thing"]


def test_apt_knows_every_package_on_this_machine():
    if shutil.which("apt-get") is None:
        pytest.skip("no apt-get on this machine: the list is for Debian and Ubuntu")
    out = subprocess.run(["apt-get", "install", "-s", "-y", "--no-install-recommends", *packages()],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_what_the_tests_need_is_installed_here():
    """On a machine set up as the README says, every program a test would skip without is there."""
    missing = [prog for prog in NEEDED if shutil.which(prog) is None]
    assert not missing, f"not on PATH: {missing}; install the list: {INSTALL}"
