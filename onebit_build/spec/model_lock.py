"""models.lock: the sha256 of each model a recipe names without pinning it (a file the user
downloads, e.g. the Strix Halo recipe's Qwen3), recorded on first use as pins.lock records
the full commit of an abbreviated pin.

Once recorded, a different file under the same name stops the run (the answers and speed
references rest on that file); ``--locked`` also refuses a model that is not recorded yet.
The decision is pure (:func:`judge`); reading and writing the file are apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from onebit_build.core.errors import ConfigError, IntegrityError
from onebit_build.core.fsutil import atomic_write_text
from onebit_build.core.names import is_file_name
from onebit_build.spec.pins import SHA256_RE
from onebit_build.spec.yamlnode import Node, check_schema, load_yaml

LOCK_SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class LockedModel:
    name: str  # the recipe's model.name
    file: str  # the recipe's model.file, for a person
    sha256: str


Decision = Literal["locked", "record"]


def read_model_lock(path: Path) -> dict[str, LockedModel]:
    """Read models.lock; a missing file is empty. Every entry is checked."""
    if path.is_dir():
        raise ConfigError(f"{path} is a folder, not the models lock file",
                          hint="remove that folder (the file is written again on the next run that checks a model)")
    if not path.exists():
        return {}
    root = Node(path, "", load_yaml(path, "model lock"))
    root.only({"schema", "models"})
    check_schema(root, LOCK_SCHEMA)
    node = root.child("models", required=False)
    out: dict[str, LockedModel] = {}
    if node is None or node.data is None:
        return out
    for name in node.data:
        name = str(name)
        if not is_file_name(name):
            node.fail("not a valid model name", "use the recipe's model.name", key=name)
        entry = node.child(name)
        assert entry is not None
        entry.only({"file", "sha256"})
        sha = entry.get("sha256", str).lower()
        if not SHA256_RE.match(sha):
            entry.fail(
                f"{sha!r} is not a sha256", "give 64 hex digits, or remove the entry and run again", key="sha256"
            )
        out[name] = LockedModel(name=name, file=entry.get("file", str), sha256=sha)
    return out


def render_model_lock(models: dict[str, LockedModel]) -> str:
    lines = [
        "# Written by onebit-build on a model's first use: the sha256 of each model a recipe does",
        "# not pin. Commit it; --locked refuses a model that is not here or whose file changed.",
        f"schema: {LOCK_SCHEMA}",
        "models:" if models else "models: {}",
    ]
    for name in sorted(models):
        m = models[name]
        lines += [f"  {name}:", f"    file: {_quoted(m.file)}", f"    sha256: '{m.sha256}'"]
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    """A YAML single-quoted scalar: no value can end its quoting or start a new key."""
    if any(ch in text for ch in "\n\r\0"):
        raise ConfigError(f"model file name {text!r} holds a line break", hint="rename the file")
    return "'" + text.replace("'", "''") + "'"


def judge(*, name: str, sha256: str, lock: dict[str, LockedModel], locked: bool, lock_path: Path) -> Decision:
    """What to do with a model of this name and hash: "locked" (it is the recorded file) or
    "record" (first use). Raises IntegrityError for a changed file, ConfigError for a first
    use under ``--locked``."""
    entry = lock.get(name)
    if entry is not None:
        if entry.sha256 == sha256:
            return "locked"
        raise IntegrityError(
            f"model {name}: sha256 {sha256} is not the one {lock_path.name} records ({entry.sha256})",
            hint=f"use the recorded file {entry.file}; if this file is meant to replace it, remove the entry "
            f"{name} from {lock_path} and run again without --locked",
        )
    if locked:
        raise ConfigError(
            f"model {name} is not recorded in {lock_path} and --locked refuses an unrecorded model",
            hint="run once without --locked to record its sha256, then commit models.lock",
        )
    return "record"


def record(path: Path, model: LockedModel) -> None:
    """Add one entry to models.lock (written atomically), keeping the others."""
    models = read_model_lock(path)
    models[model.name] = model
    atomic_write_text(path, render_model_lock(models))
