"""--adopt's reference writer: the working build's outputs and kernel artifacts recorded in
references/<recipe>/, in a file named after the toolchain that made them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from onebit_build.checking.artifacts import ArtifactSet
from onebit_build.checking.references import load_reference, reference_file, write_reference
from onebit_build.core.errors import VerifyError
from onebit_build.verify_run.request import RunRequest



def adopt_reference(req: RunRequest, working_sets: dict[tuple[str, str], ArtifactSet]) -> tuple[Path | None, str]:
    """Write the working build's artifacts (as collected now) into references/<recipe>/,
    named after the toolchain that made them. A reference of that name that records other
    artifacts is never overwritten. Returns (the file, or None) and what happened."""
    if not working_sets:
        return None, f"not adopted: recipe {req.recipe.name} collects no kernel artifacts"
    man = req.working.build.manifest
    man = replace(man, components=tuple(
        replace(c, artifacts=tuple(s for (name, _k), s in sorted(working_sets.items()) if name == c.name))
        for c in man.components))
    path = reference_file(req.refs_dir, man)
    if path.exists():
        try:
            old = load_reference(path).sets
        except VerifyError as exc:
            return None, (f"not adopted: {path} exists and cannot be read ({exc.message}); "
                          "remove it, then run --adopt again")
        if {k: s.items for k, s in old.items()} == {k: s.items for k, s in working_sets.items()}:
            return path, f"already recorded: {path} holds these artifacts"
        return None, (f"not adopted: {path} exists and records other artifacts; remove it first if the working "
                      "build's are the new truth")
    write_reference(path, man)
    return path, f"wrote {path}"
