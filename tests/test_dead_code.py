"""No dead code: vulture finds no module-level name, function, method or attribute of the
package that nothing uses (tests/vulture_allow.py names those used in ways it cannot see)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_nothing_in_the_package_is_unused():
    vulture = shutil.which("vulture", path=str(Path(sys.executable).parent))
    assert vulture, "vulture is in the test extra: pip install -e '.[test]'"
    out = subprocess.run([vulture, "onebit_build", "tests/vulture_allow.py", "--min-confidence", "60"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout == "" and out.returncode == 0, out.stdout + out.stderr
