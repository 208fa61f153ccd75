"""The settings a job runs with: the global part of the user's request, taken once from the
command line (``commands/_options.py``, ``Options.settings``); the job and the stages read
these, never the command line's options. Its own module, light to import: the command line
makes it before it knows whether a job runs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from onebit_build.building.cache.request import CacheRequest
from onebit_build.spec.defines import Define


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The global settings the stages read: the part of the user's request that is not the
    command's own (its options stay with the command's module)."""

    recipe: str  # as given: a recipe name or a recipe file
    defines: tuple[Define, ...] = ()
    mirror_dirs: tuple[Path, ...] = ()
    offline: bool = False
    locked: bool = False
    fresh: bool = False
    jobs: int | None = None
    toolchain_root: str | None = None
    compiler_cache: CacheRequest = field(default_factory=CacheRequest)
    model: Path | None = None
    junit: Path | None = None
    write_numerics: Path | None = None  # smoke: write the CPU scoring run as a numerical reference here
    signing_key: Path | None = None  # --signing-key (else $ONEBIT_SIGNING_KEY names one, or none)
    workspace: Path  # --workspace (else $ONEBIT_WORKSPACE, else the default), resolved and checked
    run_dir: Path | None = None  # --run-dir: this invocation's run folder (new or empty); None: a new one


def recipe_is_file(text: str) -> bool:
    """``--recipe`` names a file (rather than a recipe of the project) when it looks like a path."""
    return text.endswith((".yaml", ".yml")) or os.sep in text
