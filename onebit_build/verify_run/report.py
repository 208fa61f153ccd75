"""What a verification run leaves in its run folder: ``verification.md`` (to paste into a pull
request), ``verification.json`` (schema-versioned) and ``verification.tar.gz`` (the two, the
manifests of both builds, the server logs and the artifact lists).

Each file is written under a temporary name in the run folder and renamed into place, so a
reader finds the whole file or none; an interrupted run leaves no temporary file behind.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from onebit_build.core.fsutil import atomic_write_bytes
from onebit_build.verify_run.verdict import SPEED, SPEED_NOT_MEASURED, Part, RunVerdict

KIND = "onebit-build/verification"
SCHEMA = 1
MD = "verification.md"
JSON = "verification.json"
BUNDLE = "verification.tar.gz"


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """What the report says about the run besides the parts."""

    recipe: str
    new: dict[str, Any]  # ResolvedBuild.to_dict() and more
    working: dict[str, Any]
    rounds: int
    tolerance: float
    devices: tuple[str, ...]
    started_at: str
    seconds: float
    run_dir: str
    settings: dict[str, Any] | None = None  # e.g. extra server arguments of either side
    model: dict[str, Any] | None = None  # the served model: path, sha256, source
    speed_measured: bool = True  # False: --no-speed (no rounds; rounds and tolerance not used)


@dataclass(frozen=True, kw_only=True)
class Written:
    md: Path
    json: Path
    bundle: Path


def verification_doc(verdict: RunVerdict, facts: RunFacts) -> dict[str, Any]:
    """The JSON document (without kind and schema, which :func:`write_all` adds)."""
    return {
        "verdict": verdict.label, "verified": verdict.verified, "exit_code": verdict.exit_code,
        "failed": list(verdict.failed), "not_judged": list(verdict.not_judged), "headline": verdict.headline(),
        "recipe": facts.recipe, "devices": list(facts.devices), "speed_measured": facts.speed_measured,
        "rounds": facts.rounds if facts.speed_measured else None,
        "tolerance": facts.tolerance if facts.speed_measured else None,
        "started_at": facts.started_at, "seconds": round(facts.seconds, 1), "run_dir": facts.run_dir,
        "builds": {"new": facts.new, "working": facts.working}, "settings": dict(facts.settings or {}),
        "model": dict(facts.model or {}),
        "parts": [p.to_dict() for p in verdict.parts],
    }


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _speed_rows(part: Part) -> list[list[str]]:
    rows = []
    for d in part.data.get("per_device", []):
        iv = d.get("interval")
        med = d.get("median_ratio")
        rows.append([
            d["device"], d["metric"], _fmt(d.get("working_median_tok_s")), _fmt(d.get("new_median_tok_s")),
            f"{med:.3f}" if med is not None else "-",
            f"{iv[0]:.3f}..{iv[1]:.3f} ({d['coverage']:.0%})" if iv else "-",
            f"{d.get('rounds_valid', 0)}/{d.get('rounds_run') or d.get('rounds_asked', 0)}", d["verdict"],
        ])
    return rows


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def render_markdown(verdict: RunVerdict, facts: RunFacts) -> str:
    """The report a maintainer pastes into a pull request."""
    out = [f"## Verification run: {verdict.title}", ""]
    how = (f"at least {facts.rounds} interleaved rounds; speed tolerance ±{facts.tolerance:.0%}"
           if facts.speed_measured else f"speed {SPEED_NOT_MEASURED}")
    out.append(f"Recipe `{facts.recipe}`; devices {', '.join(facts.devices) or '-'}; {how}; "
               f"{facts.started_at}, {facts.seconds:.0f} s.")
    if facts.model:
        out.append(f"Model `{Path(str(facts.model.get('path', ''))).name}` sha256 `{facts.model.get('sha256', '')}`.")
    out.append("")
    out += md_table(["build", "folder", "given as"], [
        ["new", f"`{facts.new.get('folder')}`", facts.new.get("given_as", "")],
        ["working", f"`{facts.working.get('folder')}`", facts.working.get("given_as", "")],
    ])
    out.append("")
    out += md_table(["part", "result", "detail"],
                    [[p.name, "**FAILED**" if p.status == "FAILED" else p.status, p.summary] for p in verdict.parts])
    for p in verdict.parts:
        out += ["", f"### {p.name.capitalize()}", ""]
        if p.name == SPEED and p.data.get("per_device"):
            out += md_table(["device", "metric", "working tok/s", "new tok/s", "new/working", "interval of the ratio",
                             "rounds", "verdict"],
                            _speed_rows(p))
            out.append("")
        if p.lines:
            out += ["```", *p.lines, "```"]
        else:
            out.append(p.summary)
    if facts.settings:
        out += ["", "Settings: " + ", ".join(f"{k} `{v}`" for k, v in facts.settings.items() if v)]
    out += ["", f"Exit code {verdict.exit_code}. Made by onebit-build verify-run; the bundle `{BUNDLE}` holds the "
                "manifests, logs and artifact lists.", ""]
    return "\n".join(out)


def _tar_bytes(members: Sequence[tuple[str, bytes | Path]]) -> bytes:
    """A gzipped tar of ``members`` (archive name, bytes or a file), in the given order."""
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, item in members:
            if isinstance(item, Path):
                if item.is_file():
                    tar.add(str(item), arcname=name, recursive=False)
                continue
            info = tarfile.TarInfo(name)
            info.size = len(item)
            info.mtime = now
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(item))
    return buf.getvalue()


def write_all(run_dir: Path, verdict: RunVerdict, facts: RunFacts, *,
              bundle_files: Sequence[tuple[str, Path]] = ()) -> Written:
    """Write the three files into ``run_dir``. Everything is rendered first; then each file
    is written atomically (bundle first, the markdown last), so that a failure while
    rendering leaves none of them."""
    doc = {"kind": KIND, "schema": SCHEMA, **verification_doc(verdict, facts)}
    json_bytes = (json.dumps(doc, indent=2) + "\n").encode("utf-8")
    md_bytes = render_markdown(verdict, facts).encode("utf-8")
    tar = _tar_bytes([(MD, md_bytes), (JSON, json_bytes), *bundle_files])
    paths = Written(md=run_dir / MD, json=run_dir / JSON, bundle=run_dir / BUNDLE)
    atomic_write_bytes(paths.bundle, tar)
    atomic_write_bytes(paths.json, json_bytes)
    atomic_write_bytes(paths.md, md_bytes)
    return paths
