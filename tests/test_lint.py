"""The repository passes ruff with its own configuration (pyproject.toml), and that
configuration holds lines to 120 characters."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_LINE = 120


def ruff_check(folder: Path) -> subprocess.CompletedProcess[str]:
    """``ruff check .`` in ``folder`` with the ruff installed next to this Python (the test extra)."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    assert ruff, "ruff is in the test extra: pip install -e '.[test]'"
    return subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", "."], cwd=folder,
                          capture_output=True, text=True, timeout=120)


def test_the_repository_passes_ruff_with_its_own_configuration():
    out = ruff_check(REPO)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_configuration_rejects_a_line_of_121_characters(tmp_path):
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    longest = "x = " + repr("a" * (MAX_LINE - 6))
    too_long = "y = " + repr("b" * (MAX_LINE - 5))
    assert (len(longest), len(too_long)) == (MAX_LINE, MAX_LINE + 1)
    (tmp_path / "lines.py").write_text(f"{longest}\n{too_long}\n", encoding="utf-8")
    out = ruff_check(tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    findings = [line for line in out.stdout.splitlines() if line.startswith("lines.py:")]
    assert len(findings) == 1 and findings[0].startswith("lines.py:2:") and "E501" in findings[0], out.stdout
