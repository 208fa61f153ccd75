"""models.lock: a recipe model without a pinned sha256 is recorded on first use (the run
says so), a changed file under the same name stops the run, and --locked refuses a model
that is not recorded. Pure decisions first, then the real CLI on a real GGUF file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from _support import run_cli
from tiny_chat_model import write_tiny_model

from onebit_build.spec import model_lock
from onebit_build.core.errors import ConfigError, IntegrityError
from onebit_build.core.fsutil import sha256_file
from onebit_build.spec.pins import load_pins, render_lock

REPO = Path(__file__).resolve().parent.parent
A, B = "a" * 64, "b" * 64
LOCK = Path("models.lock")


def entry(sha: str = A, name: str = "Qwen3-0.6B-Q4_0") -> dict[str, model_lock.LockedModel]:
    return {name: model_lock.LockedModel(name=name, file="Qwen3-0.6B-Q4_0.gguf", sha256=sha)}


def test_first_use_is_recorded():
    assert model_lock.judge(name="Qwen3-0.6B-Q4_0", sha256=A, lock={}, locked=False, lock_path=LOCK) == "record"


def test_the_recorded_file_passes_even_when_locked():
    assert model_lock.judge(name="Qwen3-0.6B-Q4_0", sha256=A, lock=entry(), locked=True, lock_path=LOCK) == "locked"


@pytest.mark.parametrize("locked", [False, True])
def test_a_changed_file_is_refused(locked):
    with pytest.raises(IntegrityError, match="is not the one models.lock records") as err:
        model_lock.judge(name="Qwen3-0.6B-Q4_0", sha256=B, lock=entry(), locked=locked, lock_path=LOCK)
    assert err.value.exit_code == 5 and "remove the entry" in err.value.hint


def test_locked_refuses_an_unrecorded_model():
    with pytest.raises(ConfigError, match="--locked refuses an unrecorded model") as err:
        model_lock.judge(name="Qwen3-0.6B-Q4_0", sha256=A, lock=entry(name="other"), locked=True, lock_path=LOCK)
    assert err.value.exit_code == 2


def test_the_file_round_trips_and_keeps_other_entries(tmp_path):
    path = tmp_path / "models.lock"
    model_lock.record(path, model_lock.LockedModel(name="one", file="it's: a #file.gguf", sha256=A))
    model_lock.record(path, model_lock.LockedModel(name="two", file="two.gguf", sha256=B))
    got = model_lock.read_model_lock(path)
    assert got["one"].file == "it's: a #file.gguf" and got["one"].sha256 == A and got["two"].sha256 == B


def test_a_line_break_in_a_file_name_never_reaches_the_file(tmp_path):
    with pytest.raises(ConfigError, match="line break"):
        model_lock.record(tmp_path / "models.lock", model_lock.LockedModel(name="x", file="a\nevil: 1", sha256=A))
    assert not (tmp_path / "models.lock").exists()


@pytest.mark.parametrize(
    "text, problem",
    [
        ("schema: 1\nmodels:\n  m:\n    file: f\n    sha256: 'abc'\n", "is not a sha256"),
        ("schema: 1\nmodels:\n  m:\n    file: f\n    sha256: '" + A + "'\n    extra: 1\n", "extra"),
        ("schema: 2\nmodels: {}\n", "schema"),
    ],
)
def test_a_damaged_lock_is_a_config_error(tmp_path, text, problem):
    path = tmp_path / "models.lock"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem):
        model_lock.read_model_lock(path)


# --------------------------------------------------------------------------- the real CLI


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of the project's pins and recipes: the run writes models.lock beside them."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy2(REPO / "pins.yaml", root / "pins.yaml")
    shutil.copytree(REPO / "recipes", root / "recipes")
    # --locked also needs every abbreviated pin resolved: a lock made up for this copy only
    pins = load_pins(root / "pins.yaml")
    made_up = {
        n: {"prefix": p.commit, "commit": p.commit.ljust(40, "0")} for n, p in pins.sources.items() if not p.resolved
    }
    (root / "pins.lock").write_text(render_lock(made_up))
    return root


def smoke(project: Path, tmp_path: Path, model: Path, *extra: str):
    """The model stage of a Strix Halo smoke run; a non-server binary then ends the run."""
    fake = tmp_path / "not-a-server"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    return run_cli(
        project,
        "--workspace",
        str(tmp_path / "ws"),
        "--hrx",
        "on",
        *extra,
        "smoke",
        "--server",
        str(fake),
        env={"ONEBIT_HRX_MODEL": str(model), "ONEBIT_TOOLCHAIN_ROOT": str(tmp_path / "therock")},
    )


def test_the_cli_records_then_refuses_a_changed_model(project, tmp_path):
    model = write_tiny_model(tmp_path / "Qwen3-0.6B-Q4_0.gguf", chat_template=None)
    locked = smoke(project, tmp_path, model, "--locked")
    assert locked.returncode == 2 and "--locked refuses an unrecorded model" in locked.stderr + locked.stdout
    assert not (project / "models.lock").exists()

    first = smoke(project, tmp_path, model)
    out = first.stdout + first.stderr
    assert f"recorded its sha256 {sha256_file(model)}" in out, out
    assert model_lock.read_model_lock(project / "models.lock")["Qwen3-0.6B-Q4_0"].sha256 == sha256_file(model)

    again = smoke(project, tmp_path, model, "--locked")
    assert "refuses" not in again.stdout + again.stderr and "recorded its" not in again.stdout + again.stderr

    write_tiny_model(model, chat_template=None, seed=2)
    changed = smoke(project, tmp_path, model)
    assert changed.returncode == 5 and "is not the one models.lock records" in changed.stdout + changed.stderr
    assert "Traceback" not in changed.stderr
