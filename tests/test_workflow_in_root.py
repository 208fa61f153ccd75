"""benchmarks/workflow_in_root.py on its cheapest case: the dry run lists the Debian job's
steps as the workflow has them, in order, with every expression it meets filled in; what it
cannot know it refuses; GITHUB_ENV is read as the runner writes it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import yaml

from _support import REPO

SCRIPT = REPO / "benchmarks" / "workflow_in_root.py"


def module():
    spec = importlib.util.spec_from_file_location("workflow_in_root", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_dry_run_lists_every_step_of_the_debian_job_in_order():
    job = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())["jobs"]["debian"]
    assert job["container"] == "debian:12" and job["defaults"]["run"]["shell"] == "bash"
    out = subprocess.run([sys.executable, str(SCRIPT), "--job", "debian", "--dry-run"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == len(job["steps"])
    for line, step in zip(lines, job["steps"]):
        what = "run" if "run" in step else "checkout" if step["uses"].startswith("actions/checkout@") else "skip"
        assert line.startswith(f"{what:<8} {step.get('name') or step['uses']}"), (line, step)
    # The build step is the one that must end VERIFIED against the Debian 12 reference.
    build = next(s for s in job["steps"] if s.get("name", "").startswith("Default build"))
    assert "--compiler-cache none verify" in build["run"] and "against debian-gnu-linux-12-" in build["run"]
    assert (REPO / "references" / "default" / "debian-gnu-linux-12-gcc-12.2.0.json").is_file()


def test_expressions_are_filled_in_or_refused():
    mod = module()
    env = {"ONEBIT_WORKSPACE": "/w"}
    assert mod.expand("${{ env.ONEBIT_WORKSPACE }}/runs ${{ runner.os }}", env) == "/w/runs Linux"
    with pytest.raises(ValueError, match="secrets.TOKEN"):
        mod.expand("${{ secrets.TOKEN }}", env)


def test_github_env_lines_and_blocks_are_read(tmp_path):
    f = tmp_path / "env"
    f.write_text("A=1\nB=x=y\nTEXT<<EOF\nline one\nline two\nEOF\nC=3\n")
    assert module().read_env_file(f) == {"A": "1", "B": "x=y", "TEXT": "line one\nline two", "C": "3"}
