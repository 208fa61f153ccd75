"""The test command's own set-up holds: with the pytest and pytest-xdist the test extra
installs, tests put in one xdist group (by a mark, or by a collection hook as
tests/conftest.py does) run on one worker. Where they do not, the shared-workspace tests
still wait for each other through tests/_shared.py's locks, but the run takes longer."""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import textwrap


def test_tests_of_one_group_run_on_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""\
        import pytest

        @pytest.hookimpl(tryfirst=True)
        def pytest_collection_modifyitems(config, items):
            for item in items:
                if item.name.startswith("test_hooked"):
                    item.add_marker(pytest.mark.xdist_group("hooked"))
        """))
    body = "".join(f"@pytest.mark.xdist_group('marked')\ndef test_marked_{i}():\n    pass\n\n" for i in range(4))
    body += "".join(f"def test_hooked_{i}():\n    pass\n\ndef test_free_{i}():\n    pass\n\n" for i in range(4))
    (tmp_path / "test_sample.py").write_text("import pytest\n\n" + body)
    # A temporary folder of its own: in the default place pytest would first prune the outer
    # run's old ones, build trees of gigabytes, which took most of this test's 20 s.
    out = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-n", "2", "--dist",
                          "loadgroup", "--basetemp", str(tmp_path / "inner"), "test_sample.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    workers = collections.defaultdict(set)
    for worker, name in re.findall(r"\[(gw\d+)\] \[ *\d+%\] PASSED test_sample\.py::(\w+)", out.stdout):
        workers[name.rsplit("_", 1)[0]].add(worker)
    assert set(workers) == {"test_marked", "test_hooked", "test_free"}, out.stdout
    assert len(workers["test_marked"]) == 1 and len(workers["test_hooked"]) == 1, out.stdout
