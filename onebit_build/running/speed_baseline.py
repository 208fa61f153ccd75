"""Smoke speed references, like for like: every reference records the workload it was
measured on (prompt, tokens, the server arguments that shape speed, the model's sha256),
and the smoke stage compares a device's decode speed only with a reference of the same
workload. A figure from another workload (a recipe's number taken from other telemetry, or
one measured on another model) is shown, never judged against.

A box adopts its own first figures: ``verify-run --adopt`` measures the working build with
the smoke workload and adds them to ``references/<recipe>/smoke-speed.json``; an entry for a
device and workload that is already there is never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from onebit_build.spec.recipe import SmokeSpec
from onebit_build.core.errors import ConfigError
from onebit_build.core.fsutil import StateError, read_state, sha256_bytes, write_state
from onebit_build.running.server_args import device_args

REF_KIND = "onebit-smoke-speed-reference"
REF_SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class SpeedWorkload:
    """What a decode figure was measured on."""

    prompt: str  # the prompt's name
    prompt_sha256: str  # of its text
    tokens: int  # generated tokens per timed request
    server_args: tuple[str, ...]  # the arguments that shape speed (device, layers, context, slots, threads, extra)
    model_sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "prompt_sha256": self.prompt_sha256,
            "tokens": self.tokens,
            "server_args": list(self.server_args),
            "model_sha256": self.model_sha256,
        }

    @classmethod
    def from_dict(cls, doc: Any, where: str) -> SpeedWorkload:
        want = {f.name for f in fields(cls)}
        if not isinstance(doc, dict) or set(doc) != want:
            raise ConfigError(
                f"{where}: a workload needs exactly the keys {', '.join(sorted(want))}",
                hint="remove the entry and adopt it again with 'verify-run --adopt'",
            )
        args, tokens = doc["server_args"], doc["tokens"]
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args) or not isinstance(tokens, int):
            raise ConfigError(
                f"{where}: server_args must be a list of strings and tokens a number",
                hint="remove the entry and adopt it again with 'verify-run --adopt'",
            )
        return cls(
            prompt=str(doc["prompt"]),
            prompt_sha256=str(doc["prompt_sha256"]),
            tokens=tokens,
            server_args=tuple(args),
            model_sha256=str(doc["model_sha256"]),
        )

    def differences(self, other: SpeedWorkload) -> list[str]:
        """The names of the fields in which ``other`` differs."""
        return [f.name for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)]


@dataclass(frozen=True, kw_only=True)
class SpeedReference:
    device: str
    decode_tok_s: float
    workload: SpeedWorkload | None  # None: not known (a recipe's figure), so never compared
    source: str  # where the figure comes from, for a person


def smoke_workload(
    spec: SmokeSpec, device: str, *, model_sha256: str, threads: int | None, extra_args: tuple[str, ...] = ()
) -> SpeedWorkload:
    """The workload of the smoke stage's speed measurement on ``device`` (a server run with
    ``-t threads`` when given)."""
    first = spec.prompts[0]
    args = [*device_args(device), "-np", "1", "-c", str(spec.ctx_size)]
    if threads is not None:
        args += ["-t", str(threads)]
    return SpeedWorkload(
        prompt=first.name,
        prompt_sha256=sha256_bytes(first.prompt.encode()),
        tokens=spec.speed_tokens,
        server_args=(*args, *extra_args),
        model_sha256=model_sha256,
    )


def recipe_references(spec: SmokeSpec, recipe_name: str) -> tuple[SpeedReference, ...]:
    """The recipe's own reference figures: their workload is not recorded."""
    return tuple(
        SpeedReference(device=d, decode_tok_s=v, workload=None, source=f"recipe {recipe_name}")
        for d, v in spec.reference_tok_s
    )


def pick(refs: tuple[SpeedReference, ...], device: str, workload: SpeedWorkload) -> tuple[SpeedReference | None, str]:
    """The reference to judge ``device`` against (one of the same workload) and a note
    saying which it is or why none is."""
    mine = [r for r in refs if r.device == device]
    for r in mine:
        if r.workload == workload:
            return r, f"reference {r.decode_tok_s:g} tok/s from {r.source}, measured on this workload"
    if not mine:
        return None, f"no reference for {device}; adopt this box's own with 'verify-run --adopt'"
    r = mine[0]
    why = (
        "its workload is not recorded"
        if r.workload is None
        else f"it was measured on another workload ({', '.join(r.workload.differences(workload))} differ)"
    )
    return None, (
        f"not compared with {r.decode_tok_s:g} tok/s from {r.source}: {why}; "
        "adopt this box's own with 'verify-run --adopt'"
    )


def load_references(path: Path) -> tuple[SpeedReference, ...]:
    """The adopted references in ``path``; none when the file does not exist."""
    if not path.exists():
        return ()
    try:
        doc = read_state(path, REF_KIND, REF_SCHEMA)
    except StateError as exc:
        raise ConfigError(str(exc), hint="remove the file and adopt again with 'verify-run --adopt'") from None
    out = []
    for i, e in enumerate(doc.get("references") or []):
        where = f"{path}: references[{i}]"
        if (
            not isinstance(e, dict)
            or not isinstance(e.get("decode_tok_s"), (int, float))
            or not isinstance(e.get("device"), str)
        ):
            raise ConfigError(f"{where}: needs device and decode_tok_s", hint="remove the entry and adopt it again")
        out.append(
            SpeedReference(
                device=e["device"],
                decode_tok_s=float(e["decode_tok_s"]),
                workload=SpeedWorkload.from_dict(e.get("workload"), where),
                source=str(e.get("source", path.name)),
            )
        )
    return tuple(out)


def adopt(path: Path, new: list[SpeedReference]) -> list[str]:
    """Add the references whose device and workload ``path`` does not hold yet; say what
    happened to each."""
    have = list(load_references(path))
    said = []
    for ref in new:
        if ref.workload is None:
            raise ValueError("adopt: a reference without its workload")
        old = next((h for h in have if h.device == ref.device and h.workload == ref.workload), None)
        if old is not None:
            said.append(
                f"{ref.device}: kept the reference {old.decode_tok_s:g} tok/s already adopted "
                f"for this workload ({path})"
            )
            continue
        have.append(ref)
        said.append(f"{ref.device}: adopted {ref.decode_tok_s:.1f} tok/s ({ref.source}) into {path}")
    write_state(
        path,
        REF_KIND,
        REF_SCHEMA,
        {
            "references": [
                {
                    "device": r.device,
                    "decode_tok_s": round(r.decode_tok_s, 2),
                    "source": r.source,
                    "workload": r.workload.to_dict() if r.workload else None,
                }
                for r in have
            ]
        },
    )
    return said
