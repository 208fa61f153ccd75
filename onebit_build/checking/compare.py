"""Verify stage: compare a build's kernel artifacts (and, for a rebuild, its outputs) with a
reference, and explain every difference by the recorded toolchain facts."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from onebit_build.checking.artifacts import KINDS, PATH_FACTS, Artifact, ArtifactSet
from onebit_build.checking.manifest import Manifest
from onebit_build.checking.references import Reference
from onebit_build.core import proc
from onebit_build.core.errors import VerifyError


@dataclass(frozen=True, kw_only=True)
class SetComparison:
    component: str
    kind: str
    label: str
    reference_count: int
    identical: int
    missing: tuple[tuple[str, int], ...]  # in the reference, not in the build
    extra: tuple[tuple[str, int], ...]  # in the build, not in the reference
    differing: tuple[tuple[str, int, int], ...]  # name, reference size, build size
    fact_diffs: tuple[tuple[str, str, str], ...]  # fact, reference value, build value
    warnings: tuple[str, ...] = ()
    first_diff: str | None = None  # disassembly excerpt of the first differing artifact

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.differing)

    def summary(self) -> str:
        return f"{self.label}: {self.identical}/{self.reference_count} byte-identical"

    def lines(self) -> list[str]:
        out = [self.summary() + ("" if self.ok else "  DIFFERENT")]
        for name, size in self.missing:
            out.append(f"  missing  {name} ({size} bytes in the reference)")
        for name, size in self.extra:
            out.append(f"  extra    {name} ({size} bytes, not in the reference)")
        for name, rs, bs in self.differing:
            out.append(f"  differs  {name} (reference {rs} bytes, build {bs} bytes)")
        if not self.ok:
            if self.fact_diffs:
                for fact, rv, bv in self.fact_diffs:
                    out.append(f"  explained by {fact}: reference {rv!r} vs this build {bv!r}")
            else:
                out.append("  the recorded toolchain facts are the same: an unexplained difference")
        for w in self.warnings:
            out.append(f"  warning: {w}")
        if self.first_diff:
            out.append(self.first_diff)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "component": self.component, "kind": self.kind, "label": self.label, "ok": self.ok,
            "summary": self.summary(), "reference_count": self.reference_count, "identical": self.identical,
            "missing": [list(m) for m in self.missing], "extra": [list(e) for e in self.extra],
            "differing": [list(d) for d in self.differing], "fact_diffs": [list(f) for f in self.fact_diffs],
            "warnings": list(self.warnings),
        }


def compare_sets(component: str, cur: ArtifactSet, ref: ArtifactSet) -> SetComparison:
    """Pure comparison of two artifact sets of the same kind."""
    rmap = {a.name: a for a in ref.items}
    cmap = {a.name: a for a in cur.items}
    missing = tuple((n, rmap[n].size) for n in sorted(rmap) if n not in cmap)
    extra = tuple((n, cmap[n].size) for n in sorted(cmap) if n not in rmap)
    differing = tuple((n, rmap[n].size, cmap[n].size) for n in sorted(rmap) if n in cmap
                      and rmap[n].sha256 != cmap[n].sha256)
    identical = sum(1 for n in rmap if n in cmap and rmap[n].sha256 == cmap[n].sha256)
    keys = sorted(set(ref.facts) | set(cur.facts))
    fact_diffs = tuple((k, ref.facts.get(k, "(not recorded)"), cur.facts.get(k, "(not recorded)")) for k in keys
                       if k not in PATH_FACTS and ref.facts.get(k) != cur.facts.get(k))
    warnings = []
    for k in PATH_FACTS:
        if k in ref.facts and k in cur.facts and ref.facts[k] != cur.facts[k]:
            warnings.append(f"the reference was built from another path ({ref.facts[k]}; this build: {cur.facts[k]}); "
                            + ("byte identity needs the same absolute source path"
                               if cur.kind in KINDS and KINDS[cur.kind].path_matters else "paths differ"))
    return SetComparison(
        component=component, kind=cur.kind, label=cur.label, reference_count=len(rmap), identical=identical,
        missing=missing, extra=extra, differing=differing, fact_diffs=fact_diffs, warnings=tuple(warnings),
    )


def compare_outputs(cur: list[dict[str, Any]], ref: list[dict[str, Any]]) -> SetComparison:
    """Output binaries of two builds, compared like an artifact set. One the reference has and
    this build does not make (its recipe leaves it out) is said, not a difference: nothing of
    it ships. Every output the build makes must be the reference's."""
    def as_set(outputs: list[dict[str, Any]]) -> ArtifactSet:
        return ArtifactSet(kind="outputs", root="",
                           items=tuple(Artifact(name=o["name"], size=int(o["size"]), sha256=o["sha256"])
                                       for o in outputs))

    res = compare_sets("", as_set(cur), as_set(ref))
    built = len(cur) - len(res.extra)
    notes = (f"not built here: {', '.join(n for n, _ in res.missing)}",) if res.missing else ()
    return SetComparison(**{**res.__dict__, "label": "output binaries", "missing": (), "reference_count": built,
                            "warnings": res.warnings + notes})


def first_spirv_diff(ref_file: Path, cur_file: Path, lines: int = 12) -> str | None:
    """The first differing lines of two shaders' disassembly, when spirv-dis is present."""
    dis = shutil.which("spirv-dis")
    if dis is None or not ref_file.is_file() or not cur_file.is_file():
        return None
    texts = []
    for f in (ref_file, cur_file):
        out = proc.capture([dis, "--no-header", "--raw-id", f])
        texts.append(out.stdout.splitlines() if out.ok else [])
    a, b = texts
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            excerpt = [f"  first difference in {cur_file.name} at disassembly line {i + 1}:"]
            excerpt += [f"    - {line}" for line in a[i:i + lines // 2]]
            excerpt += [f"    + {line}" for line in b[i:i + lines // 2]]
            return "\n".join(excerpt)
    if len(a) != len(b):
        return f"  {cur_file.name}: disassembly lengths differ ({len(a)} vs {len(b)} lines)"
    return None


def verify_against(manifest: Manifest | Mapping[str, Any], ref: Reference, *,
                   with_outputs: bool = False) -> list[SetComparison]:
    man = Manifest.of(manifest)
    cur_sets = man.artifact_sets()
    results = []
    if not cur_sets and not with_outputs:  # a rebuild still compares its output binaries
        raise VerifyError(f"recipe {man.recipe} recorded no kernel artifacts",
                          hint="add an 'artifacts:' collector to the recipe's component")
    for key, cur in sorted(cur_sets.items()):
        r = ref.sets.get(key)
        if r is None:
            raise VerifyError(f"reference {ref.path} has no {cur.label} for component {key[0]}",
                              hint="use a reference made for this recipe")
        comp = compare_sets(key[0], cur, r)
        if comp.differing and cur.kind == "spirv" and key[0] in ref.build_dirs:
            name = comp.differing[0][0]
            diff = first_spirv_diff(Path(r.root) / name, Path(cur.root) / name)
            if diff:
                comp = SetComparison(**{**comp.__dict__, "first_diff": diff})
        results.append(comp)
    if with_outputs:
        for c in man.components:
            if c.name in ref.outputs:
                outputs = [{"name": o.name, "size": o.size, "sha256": o.sha256} for o in c.outputs]
                oc = compare_outputs(outputs, ref.outputs[c.name])
                results.append(SetComparison(**{**oc.__dict__, "component": c.name}))
    return results
