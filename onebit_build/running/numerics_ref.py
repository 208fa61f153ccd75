"""The numerical reference: a CPU scoring run of the evaluation text, committed per recipe and
toolchain (``references/<recipe>/numerics/<toolchain>.json``) and written by ``smoke
--write-numerics FILE``. It names everything the figures depend on (the workload: model,
text and its tokens, context, micro-batch, schedule, top-k, threads); a run is compared with
it only when the workload is the same, threads aside (measured: they move no figure past the
budgets, docs/smoke.md)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from onebit_build.core.fsutil import atomic_write_text
from onebit_build.spec.numerics_spec import NumericsSpec
from onebit_build.core.safepath import TooLarge, read_regular
from onebit_build.running import numerics as nm

KIND = "onebit-build numerical reference"
SCHEMA = 1
MAX_BYTES = 1 << 20  # a reference is about 60 kB; anything past 1 MiB is not one
EVAL_DIR = "eval"  # under smoke/: the evaluation texts


def tokens_digest(tokens: tuple[int, ...]) -> str:
    return hashlib.sha256(",".join(map(str, tokens)).encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class NumericsWorkload:
    """What a scoring run's figures depend on."""

    model_sha256: str
    text: str
    text_sha256: str
    tokens_sha256: str = ""  # filled in once the server has tokenized the text
    ctx_size: int
    ubatch: int
    rounds: int
    jump: int
    steps: int
    top_k: int
    threads: int | None = None

    @classmethod
    def of(cls, spec: NumericsSpec, *, model_sha256: str, text_sha256: str, ctx_size: int,
           threads: int | None) -> NumericsWorkload:
        return cls(model_sha256=model_sha256, text=spec.text, text_sha256=text_sha256, ctx_size=ctx_size,
                   ubatch=spec.ubatch, rounds=spec.rounds, jump=spec.jump, steps=spec.steps, top_k=spec.top_k,
                   threads=threads)

    def with_tokens(self, tokens: tuple[int, ...]) -> NumericsWorkload:
        return replace(self, tokens_sha256=tokens_digest(tokens))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def mismatch(self, other: NumericsWorkload) -> str:
        """What differs between two workloads, threads aside ("" when nothing). Pure."""
        mine, theirs = self.to_dict(), other.to_dict()
        for key in mine:
            if key != "threads" and mine[key] != theirs[key]:
                return f"{key} {theirs[key]!r}, the reference's {mine[key]!r}"
        return ""


@dataclass(frozen=True, kw_only=True)
class NumericsReference:
    path: Path
    workload: NumericsWorkload
    scored: tuple[nm.Scored, ...]
    recorded: dict[str, Any]


def write_reference(path: Path, *, workload: NumericsWorkload, scored: tuple[nm.Scored, ...],
                    recorded: dict[str, Any]) -> Path:
    """Write a reference (atomically; its folder made when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"kind": KIND, "schema": SCHEMA, "workload": workload.to_dict(), "recorded": recorded,
           "ppl": round(nm.perplexity(scored), 6), "positions": [s.to_json() for s in scored]}
    # One position per line: small, and a diff of two references reads position by position.
    rows = ",\n".join("    " + json.dumps(r, separators=(",", ":")) for r in doc.pop("positions"))
    head = json.dumps(doc, indent=2)[:-2]
    atomic_write_text(path, f"{head},\n  \"positions\": [\n{rows}\n  ]\n}}\n")
    return path


def load_reference(path: Path) -> NumericsReference:
    """A reference written by :func:`write_reference`; ValueError naming the file and the problem."""
    data = _read(path, f"{path}:", "a numerical reference holds")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND or doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a numerical reference of schema {SCHEMA}")
    wl = doc.get("workload")
    fields = set(NumericsWorkload.__dataclass_fields__)
    if not isinstance(wl, dict) or set(wl) != fields:
        raise ValueError(f"{path}: its workload must name exactly {', '.join(sorted(fields))}")
    try:
        workload = NumericsWorkload(**wl)
        scored = tuple(nm.Scored.from_json(r) for r in doc.get("positions") or [])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    if not scored:
        raise ValueError(f"{path}: no scored positions")
    recorded = doc.get("recorded") if isinstance(doc.get("recorded"), dict) else {}
    return NumericsReference(path=path, workload=workload, scored=scored, recorded=recorded)


def _read(path: Path, what: str, holds: str) -> bytes:
    """The bytes of ``path`` (a regular file of at most MAX_BYTES); ValueError starting with ``what``."""
    try:
        return read_regular(path, limit=MAX_BYTES)
    except TooLarge as exc:
        raise ValueError(f"{what} {exc.size} bytes, more than {holds} ({MAX_BYTES})") from None
    except OSError as exc:
        raise ValueError(f"{what} cannot be read ({exc.strerror or exc})") from None


def eval_text(smoke_dir: Path, name: str) -> tuple[str, str]:
    """The evaluation text ``smoke/eval/NAME`` and its sha256; ValueError when it cannot be read."""
    path = smoke_dir / EVAL_DIR / name
    data = _read(path, f"the evaluation text {path}:", "an evaluation text holds")
    try:
        return data.decode("utf-8"), hashlib.sha256(data).hexdigest()
    except UnicodeDecodeError:
        raise ValueError(f"the evaluation text {path} is not UTF-8") from None
