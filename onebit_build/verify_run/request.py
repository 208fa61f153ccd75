"""What a verification run is asked: both builds (its two sides), the model, the prompts and
how the speed is judged. Its own module: the parts of the run take it without importing the run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from onebit_build.evidence.keys import SigningKey
from onebit_build.evidence.scrub import Scrubber, scrubber
from onebit_build.running.bench.plan import Prompt
from onebit_build.running.bench.settings import DEFAULTS as BENCH_DEFAULTS
from onebit_build.running.model import ModelFile
from onebit_build.spec.recipe import Recipe
from onebit_build.verify_run.working import ResolvedBuild

NEW = "new"
WORKING = "working"


@dataclass(frozen=True, kw_only=True)
class Side:
    role: str  # NEW or WORKING
    build: ResolvedBuild
    args: tuple[str, ...] = ()  # extra llama-server arguments for this build's servers


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    recipe: Recipe  # with its runtime environment filled in
    new: Side
    working: Side
    model: ModelFile
    run_dir: Path
    prompts: tuple[Prompt, ...]  # the speed prompts (the bench's)
    rounds: int  # rounds before the first look at the speed interval
    tolerance: float
    refs_dir: Path  # references/<recipe>/
    budget_s: float = 900.0  # seconds of speed rounds per device (verification.budget_s, --speed-budget)
    decode_tokens: int = BENCH_DEFAULTS.decode_tokens
    lock: Path | None = None  # the bench lock the caller holds (recorded)
    junit: Path | None = None
    adopt: bool = False
    measure_speed: bool = True  # False (--no-speed): no speed rounds; the speed part is not judged
    signing_key: SigningKey | None = None  # signs the verdict's statement (None: written unsigned)
    scrub: Scrubber = field(default_factory=lambda: scrubber(workspace=None))  # what the statement must not name
    numerics_text: str | None = None  # the recipe's evaluation text (None: the recipe has no numerical check)

    @property
    def sides(self) -> tuple[Side, Side]:
        return (self.working, self.new)

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        return self.recipe.smoke.env
