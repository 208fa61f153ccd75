"""A build against the committed reference of its toolchain: every output and kernel artifact
compared, and a difference explained: the differing objects are compiled again without the
compiler cache, which tells a poisoned cache entry from a toolchain that drifted."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onebit_build.building.cache.entries import find_entries
from onebit_build.building.cmake import find_tools
from onebit_build.building.objects import Recompiled, differing_objects, recompile
from onebit_build.checking.compare import SetComparison, verify_against
from onebit_build.checking.manifest import Manifest
from onebit_build.checking.references import (Reference, find_reference, fingerprint, fingerprint_text, load_reference,
                                              reference_file)
from onebit_build.checking.whatdiffers import ReportPlace, line_of, show, stem_of, what_differs
from onebit_build.core import ui
from onebit_build.core.errors import ToolMissingError


def print_comparisons(results) -> bool:
    ok = True
    for r in results:
        for line in r.lines():
            ui.info(line if line.startswith("  ") else f"  {line}")
        ok = ok and r.ok
    return ok


@dataclass(frozen=True, kw_only=True)
class BuildVerdict:
    """What verify concluded about one build: ``verified`` (every output and kernel artifact
    is the committed reference's), ``not-verified`` (something differs) or ``unverified`` (no
    reference for this toolchain)."""

    status: str
    detail: str
    reference: str | None = None
    results: tuple[SetComparison, ...] = ()
    recompiled: tuple[Recompiled, ...] = ()
    remedy: str = ""

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"status": self.status, "detail": self.detail}
        if self.reference:
            doc["reference"] = self.reference
        if self.results:
            doc["results"] = [r.to_dict() for r in self.results]
        if self.recompiled:
            doc["recompiled"] = [{"object": r.name, "cached": r.cached, "expected": r.expected, "fresh": r.fresh,
                                  "verdict": r.verdict, "detail": r.detail} for r in self.recompiled]
        if self.remedy:
            doc["remedy"] = self.remedy
        return doc


def cache_served(manifest: Manifest) -> str:
    """``192/192 objects from the compiler cache`` (or that the build used none). Pure."""
    hits = looked = 0
    used = False
    for c in manifest.components:
        stats = (c.compiler_cache or {}).get("stats") or {}
        hits += int(stats.get("hits", 0))
        looked += int(stats.get("hits", 0)) + int(stats.get("misses", 0))
        used = used or (c.compiler_cache or {}).get("launcher") not in (None, "none")
    if looked:
        return f"{hits}/{looked} objects from the compiler cache"
    return "objects from the compiler cache: not counted (folder reused)" if used else "no compiler cache"


def committed_verdict(refs_dir: Path, manifest: Manifest, place: ReportPlace | None = None) -> BuildVerdict:
    """Every output and kernel artifact of the build against the committed reference of its
    toolchain in ``refs_dir`` (a recipe's folder); on a difference, the differing objects
    compiled again without the cache, and (with ``place``) diffoscope's reports of what differs."""
    ref_path, candidates = find_reference(refs_dir, manifest)
    if ref_path is None:
        fp = fingerprint(manifest)
        flags = f"--recipe {manifest.recipe} " if manifest.recipe != "default" else ""
        return BuildVerdict(status="unverified", detail=(
            f"no committed reference in {refs_dir} for this toolchain ({fingerprint_text(fp)});"
            f" candidates: {', '.join(candidates) or 'none'}"),
            remedy=(f"record one from a build without the compiler cache: onebit-build {flags}--compiler-cache none "
                    f"--fresh verify --write-reference {reference_file(refs_dir, manifest)}; or compare "
                    f"with a cache-free rebuild: onebit-build {flags}verify --rebuild"))
    results = tuple(verify_against(manifest, load_reference(ref_path), with_outputs=True))
    if all(r.ok for r in results):
        return BuildVerdict(status="verified", reference=str(ref_path), results=results,
                            detail=f"against {ref_path.name}: " + "; ".join(r.summary() for r in results))
    return _not_verified(manifest, load_reference(ref_path), results, place)


def _not_verified(manifest: Manifest, ref: Reference, results: tuple[SetComparison, ...],
                  place: ReportPlace | None) -> BuildVerdict:
    bad = next(r for r in results if not r.ok)
    if bad.differing:
        name, _rs, _bs = bad.differing[0]
        expected = {o["name"]: o["sha256"] for outs in ref.outputs.values() for o in outs}.get(name, "")
        found = next((o.sha256 for c in manifest.components for o in c.outputs if o.name == name), "")
        what = f"{name} differs (expected sha256 {expected[:16]}, found {found[:16]})"
    else:
        what = f"{bad.label}: " + ", ".join(n for n, _ in (bad.missing or bad.extra)[:3]) + " missing or extra"
    kept = place.folder / "recompiled" if place is not None else None
    recompiled = tuple(_recompile_differing(manifest, ref, kept))
    poisoned = [r.name for r in recompiled if r.verdict == "poisoned"]
    drifted = [r.name for r in recompiled if r.verdict == "drift"]
    if poisoned:
        cause = (f"the compiler cache served {len(poisoned)} poisoned object(s): {', '.join(poisoned[:3])} "
                 "(compiled again without the cache, each gives the reference's bytes)")
        entries = poisoned_entries(manifest, [r for r in recompiled if r.verdict == "poisoned"])
        evict = (f"remove the cache entr{'y' if len(entries) == 1 else 'ies'} {', '.join(map(str, entries))}"
                 if entries else "evict those entries from the compiler cache (or empty it)")
        remedy = f"{evict}, then rebuild without the cache: onebit-build --compiler-cache none --fresh build"
    elif drifted:
        cause = (f"the toolchain drifted: {', '.join(drifted[:3])} compiled again without the cache gives the same "
                 "bytes as the build, not the reference's")
        remedy = "record a reference for this toolchain (verify --write-reference) if the new bytes are intended"
    else:
        cause = "no object explains it" if not recompiled else "the recompiled objects match neither side"
        remedy = "rebuild without the compiler cache and compare: onebit-build verify --rebuild"
    shown = f"; {reports(manifest, ref, bad, recompiled, place)}" if place is not None else ""
    detail = f"NOT VERIFIED against {ref.path.name}: {what}; {cache_served(manifest)}; {cause}{shown}"
    return BuildVerdict(status="not-verified", reference=str(ref.path), results=results, recompiled=recompiled,
                        detail=detail, remedy=remedy)


def reports(manifest: Manifest, ref: Reference, bad: SetComparison, recompiled: tuple[Recompiled, ...],
            place: ReportPlace) -> str:
    """diffoscope's reports into the run folder: the first differing output against a copy of
    the reference's bytes on this machine, and the first recompiled object against the build's.
    Each is named on a line of its own; the verdict's line names the first report."""
    lines: list[str] = []
    if bad.differing:
        name = bad.differing[0][0]
        expected = {o["name"]: o["sha256"] for outs in ref.outputs.values() for o in outs}.get(name, "")
        found = next((Path(o.path) for c in manifest.components for o in c.outputs if o.name == name), None)
        lines.append(what_differs(found, expected, name, place))
    kept = place.folder / "recompiled"
    # Only an object whose fresh bytes differ from the build's has two sides here (a poisoned one);
    # a drifted one's other side is the reference's machine.
    redone = next((r for r in recompiled if r.fresh and r.fresh != r.cached and (kept / r.name).is_file()), None)
    if redone is not None:
        build_dir = next(Path(c.build_dir) for c in manifest.components if redone.name in c.objects)
        lines.append(line_of(show(build_dir / redone.name, kept / redone.name, place.folder, stem_of(redone.name)),
                             redone.name))
    for line in lines:
        ui.info(f"  {line}")
    shown = [ln for ln in lines if ln.startswith("what differs in ")]
    return shown[0] if shown else lines[-1] if lines else "nothing to compare"


MAX_RECOMPILES = 8
LAUNCHERS = ("sccache", "ccache")


def _recompile_differing(manifest: Manifest, ref: Reference, kept: Path | None) -> list[Recompiled]:
    out: list[Recompiled] = []
    try:
        ninja: Path | None = find_tools().ninja
    except ToolMissingError:
        ninja = None
    for c in manifest.components:
        expected = ref.objects.get(c.name) or {}
        for name in differing_objects(c.objects, expected)[:MAX_RECOMPILES - len(out)]:
            ui.info(f"  compiling {name} again without the compiler cache")
            out.append(recompile(Path(c.build_dir), name, cached=c.objects[name], expected=expected[name],
                                 launchers=LAUNCHERS, ninja=ninja, keep=kept / name if kept is not None else None))
    return out


def poisoned_entries(manifest: Manifest, poisoned: list[Recompiled]) -> list[Path]:
    """The entries of a local sccache folder that hold the poisoned objects (none for other
    caches: their entries cannot be found by content here)."""
    found: list[Path] = []
    for c in manifest.components:
        cache = c.compiler_cache or {}
        if cache.get("launcher") != "sccache" or cache.get("backend") != "local" or not cache.get("cache_dir"):
            continue
        for r in poisoned:
            obj = Path(c.build_dir) / r.name
            if obj.is_file():
                found += find_entries(Path(cache["cache_dir"]), sha256=r.cached, size=obj.stat().st_size)
    return list(dict.fromkeys(found))


def show_verdict(verdict: BuildVerdict) -> None:
    """The comparisons and the recompiled objects, one line each."""
    print_comparisons(verdict.results)
    for r in verdict.recompiled:
        fresh = r.fresh[:16] if r.fresh else f"not compiled: {r.detail}"
        ui.info(f"  object {r.name}: cached {r.cached[:16]}, reference {r.expected[:16]}, "
                f"without the cache {fresh} -> {r.verdict}")
