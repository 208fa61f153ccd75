"""A job's binary cache: a finished build published to an OCI registry, taken instead of
compiling when it is the very build this plan asks for and its bytes are the committed
reference's.

The build key is recomputed here from the pins, the patches and the recipe (as ``plan`` does,
before anything is fetched), with the workspace mapped out of it: the same inputs and
toolchain give the same key in every workspace, on every machine (:func:`portable_key`). The
tag ``<recipe>-<key>`` is resolved to a digest once, and everything is read by that digest.
A pulled build is accepted only when (1) its key is this plan's, (2) every file hashes to the
digest the manifest names, (3) every file under ``bin/`` is an output its build manifest
records, with the same sha256, (4) it was built on this system (OS, C library, linker), and
(5) those outputs equal the committed reference of that toolchain; without a reference only
``--allow-unverified`` takes it, and says so. Only then is the pulled folder switched in.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Mapping

from onebit_build.distribution.binary_cache import BinaryArtifact, parse_manifest, pull_into, replace_folder, tag_of
from onebit_build.building.builder import BuildResult, Output, Toolchain
from onebit_build.distribution.install import MANIFEST_REL
from onebit_build.checking.manifest import (MANIFEST_NAME, SERVER_OUTPUT, Manifest, host_info, latest_path,
                                            load_manifest, read_manifest, write_manifest)
from onebit_build.distribution.oci import Registry, RegistryUnreachable
from onebit_build.distribution.oci_ref import OciRef
from onebit_build.sources.patch import patch_digest
from onebit_build.sources.pkgindex import ByteProgress
from onebit_build.checking.references import find_reference, known_sizes, load_reference
from onebit_build.checking.committed import BuildVerdict
from onebit_build.checking.compare import verify_against
from onebit_build.core import ui
from onebit_build.core.errors import (ConfigError, FetchError, IntegrityError, NotAvailableError, RuntimeFloorError,
                                      VerifyError)
from onebit_build.evidence.floor import check_outputs
from onebit_build.core.fsutil import StateError
from onebit_build.core.workspace import sweep_stale
from onebit_build.job.build import Built
from onebit_build.job.job import Job

PULLED = "pulled"  # in the workspace: one folder per pulled build
SAME_SYSTEM = ("os", "machine", "libc", "linker")


@dataclass(frozen=True, kw_only=True)
class BinaryCacheRequest:
    """Where the build may be taken from (``--binary-cache``, read by ``commands/_oci.py``) and
    whether an unverified one is taken (``--allow-unverified``)."""

    ref: OciRef | None = None
    allow_unverified: bool = False


@dataclass(frozen=True, kw_only=True)
class Pulled:
    """A build taken from a registry: where from (by digest), where it lies, and why it was accepted."""

    ref: OciRef
    key: str
    artifact: BinaryArtifact
    folder: Path
    verdict: BuildVerdict


# --------------------------------------------------------------------------- the key


def plan_key(job: Job) -> str:
    """This plan's key in any workspace (job.resolve.portable_key, carried by the plan);
    NotAvailableError while it is not known before the sources are fetched."""
    if job.plan.binary_key is None:
        why = next((c.unknown for c in job.plan.components if c.unknown), "") or "; ".join(job.plan.problems)
        raise NotAvailableError(f"the build key is not known before the sources are fetched ({why})",
                                hint="run 'onebit-build fetch' first, then ask again")
    return job.plan.binary_key


# --------------------------------------------------------------------------- pulling


def pull(job: Job, ref: OciRef, *, allow_unverified: bool = False) -> Pulled | None:
    """The build this plan asks for from ``ref``, checked and switched into the workspace;
    None when the registry holds no build of this key. RegistryUnreachable or FetchError when
    the registry cannot be used; IntegrityError or VerifyError when the build is refused."""
    key = plan_key(job)
    tag = ref.tag or tag_of(job.recipe.name, key)
    with Registry(ref) as reg:
        digest = ref.digest or reg.resolve(tag)  # the tag is resolved once; all else is read by digest
        body = reg.manifest(digest) if digest else None
        if digest is None or body is None:
            return None
        where = ref.with_tag(tag).at(digest)
        art = parse_manifest(body, str(where))
        if (art.recipe, art.key) != (job.recipe.name, key):
            raise VerifyError(f"{where} holds build {art.recipe} {art.key[:16]}, but this plan is {job.recipe.name} "
                              f"{key[:16]} (pins, patches, recipe or toolchain differ)",
                              hint="publish a build of this plan, or leave the tag out to ask for this plan's")
        sizes_are_the_references(art, known_sizes(job.references), str(where))
        root = job.workspace.root / PULLED
        root.mkdir(parents=True, exist_ok=True)
        sweep_stale(root)  # what pulls that were killed left
        staging = root / f".tmp-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        bar, done = ByteProgress(f"pulling {len(art.entries)} file(s)"), [0]
        total = sum(e.size for e in art.entries if e.link is None)

        def step(n: int) -> None:
            done[0] += n
            bar.update(done[0], total)

        try:
            try:
                pull_into(reg, art, staging, step)
            finally:
                bar.close(done[0] if done[0] == total else 0)  # a pull that failed says so in one line
            verdict = accept(job, art, staging, str(where), allow_unverified=allow_unverified)
            folder = root / f"{job.recipe.name}-{key[:16]}"
            replace_folder(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return Pulled(ref=where, key=key, artifact=art, folder=folder, verdict=verdict)


def sizes_are_the_references(art: BinaryArtifact, known: Mapping[str, int], where: str) -> None:
    """Each file whose digest a committed reference names is declared with the reference's
    size, which is then all that is read of it; IntegrityError before a byte is pulled
    otherwise. (A file no reference names is read up to its declared size, within the cap
    parse_manifest holds it to.) Pure."""
    for e in art.entries:
        if e.link is None and e.digest in known and e.size != known[e.digest]:
            raise IntegrityError(f"{where}: declares {e.size} bytes for {e.rel}, but the committed reference "
                                 f"names {e.digest[:19]}... with {known[e.digest]} bytes",
                                 hint="the registry's manifest lies about the file; nothing was pulled")


def accept(job: Job, art: BinaryArtifact, folder: Path, where: str, *, allow_unverified: bool) -> BuildVerdict:
    """Whether the pulled tree in ``folder`` is this plan's build with the reference's bytes
    (see the module text); VerifyError naming the first reason it is not."""
    try:
        man = load_manifest(folder / MANIFEST_REL)
    except (OSError, StateError, VerifyError) as exc:
        raise VerifyError(f"{where}: its build manifest is missing or unreadable ({exc})",
                          hint="publish the build again with 'onebit-build publish'") from None
    _same_inputs(job, man, where)
    files_are_outputs(art, man, where)
    here = host_info()
    other = [f"{k} {man.host.get(k)!r} (here {here.get(k)!r})" for k in SAME_SYSTEM if man.host.get(k) != here.get(k)]
    if other:
        raise VerifyError(f"{where} was built on another system: {'; '.join(other)}",
                          hint="publish a build made on a system like this one, or build here")
    ref_path, candidates = find_reference(job.references, man)
    if ref_path is None:
        if not allow_unverified:
            raise VerifyError(f"{where}: no committed reference in {job.references} for its toolchain "
                              f"(candidates: {', '.join(candidates) or 'none'}), so its bytes cannot be checked",
                              hint="pass --allow-unverified to take it all the same (the report says so), or build "
                                   "here")
        return BuildVerdict(status="unverified", detail="taken with --allow-unverified: no committed reference for its "
                       f"toolchain in {job.references}")
    results = tuple(verify_against(man, load_reference(ref_path), with_outputs=True))
    bad = next((r for r in results if not r.ok), None)
    if bad is not None:
        raise VerifyError(f"{where} is NOT the committed reference's build ({ref_path.name}): "
                          + "; ".join(line.strip() for line in bad.lines()[:3]),
                          hint="the registry holds other bytes under this key: publish a verified build again")
    return BuildVerdict(status="verified", detail=f"against {ref_path.name}: "
                   + "; ".join(r.summary() for r in results), reference=str(ref_path), results=results)


def _same_inputs(job: Job, man: Manifest, where: str) -> None:
    """The build manifest's recipe and sources are this plan's (the key says so too)."""
    if man.recipe != job.recipe.name:
        raise VerifyError(f"{where}: its build manifest is of recipe {man.recipe!r}, not {job.recipe.name}",
                          hint="publish the build again")
    recorded = {s.name: (s.commit, s.patch_digest) for s in man.sources}
    for src in job.plan.sources:
        want = (src.commit, patch_digest(src.commit, src.patches))
        got = recorded.get(src.name, ("", None))
        if got != want:
            raise VerifyError(f"{where}: its build manifest names {src.name} {got[0][:12]} with patches "
                              f"{str(got[1])[:12]}, this plan {want[0][:12]} with {want[1][:12]}",
                              hint="publish a build of this plan")


def files_are_outputs(art: BinaryArtifact, man: Manifest, where: str) -> None:
    """Every file under bin/ is an output the build manifest records, with its sha256; the
    server is among them when the build has one."""
    outputs = {PurePosixPath(o.path).name: o for c in man.components for o in c.outputs}
    for e in art.entries:
        if not e.rel.startswith("bin/"):
            continue
        if e.link is not None:
            if e.rel[4:] in outputs:
                raise VerifyError(f"{where}: {e.rel} is a link, but its build manifest records it as an output file",
                                  hint="publish the build again")
            continue
        out = outputs.get(e.rel[4:])
        if out is None:
            raise VerifyError(f"{where}: {e.rel} is no output its build manifest records",
                              hint="only outputs that a reference covers are taken; publish with 'onebit-build "
                                   "publish'")
        if e.digest != f"sha256:{out.sha256}":
            raise VerifyError(f"{where}: {e.rel} is not the file its build manifest records (sha256 {e.digest[7:23]}"
                              f"..., recorded {out.sha256[:16]}...)", hint="publish the build again")
    if man.output(SERVER_OUTPUT) is not None and art.entry(f"bin/{SERVER_OUTPUT}") is None:
        raise VerifyError(f"{where}: holds no bin/{SERVER_OUTPUT}", hint="publish the build again")


# --------------------------------------------------------------------------- as the job's build


def as_built(job: Job, pulled: Pulled) -> Built:
    """The pulled build as the build stage's result: its outputs in the pulled folder, and a
    manifest (the published one, with those paths and where it came from) kept as a build's is."""
    doc = read_manifest(pulled.folder / MANIFEST_REL)
    results = []
    for comp in doc.get("components", []):
        outputs = [o for o in comp.get("outputs", []) if (pulled.folder / "bin" / PurePosixPath(o["path"]).name)
                   .is_file()]
        for o in outputs:
            o["path"] = str(pulled.folder / "bin" / PurePosixPath(o["path"]).name)
        comp.update(outputs=outputs, build_dir=str(pulled.folder))
        tc = comp.get("toolchain") or {}
        results.append(BuildResult(
            component=str(comp["name"]), build_dir=pulled.folder, key=pulled.key, reused=True, seconds=0.0,
            outputs=tuple(Output(name=o["name"], path=Path(o["path"]), sha256=o["sha256"], size=int(o["size"]))
                          for o in outputs),
            toolchain=Toolchain(**{k: str(tc.get(k) or "") for k in ("cmake", "ninja", "c_compiler",
                                                                     "cxx_compiler")}),
            configure_argv=tuple(comp.get("configure_argv", ())), build_argv=tuple(comp.get("build_argv", ())),
            defines=tuple((comp.get("defines") or {}).items())))
    doc["binary_cache"] = {"from": str(pulled.ref), "key": pulled.key, "accepted": pulled.verdict.status,
                           "detail": pulled.verdict.detail}
    final = pulled.folder / MANIFEST_NAME
    for path in (final, job.run_dir / MANIFEST_NAME, latest_path(job.workspace, job.recipe.name)):
        write_manifest(path, doc)
    return Built(fetched={}, trees={}, builds=results, manifest=final)


def from_binary_cache(job: Job, opts: BinaryCacheRequest) -> Built | None:
    """The build stage's first step with ``--binary-cache``: the pulled build, or None (one
    line says why) when the stage must build here after all."""
    if opts.ref is None:
        return None
    if job.settings.fresh:
        ui.info(f"binary cache {opts.ref} not asked: --fresh builds again")
        return None
    t0 = time.monotonic()
    try:
        pulled = pull(job, opts.ref, allow_unverified=opts.allow_unverified)
    except (RegistryUnreachable, NotAvailableError) as exc:
        ui.warn(f"binary cache: {exc.message}; building here")
        return None
    except (IntegrityError, VerifyError, FetchError, ConfigError) as exc:
        ui.warn(f"binary cache: refused: {exc}; building here")
        return None
    if pulled is None:
        ui.warn(f"binary cache: no build of this plan in {opts.ref}; building here")
        return None
    try:  # a build this box cannot run is no use here: built here instead
        check_outputs(list((pulled.folder / "bin").iterdir()), pulled.folder / MANIFEST_REL)
    except RuntimeFloorError as exc:
        ui.warn(f"binary cache: {exc.message}; building here")
        return None
    ui.info(f"{'binary':<8} ok ({time.monotonic() - t0:.1f} s)  {len(pulled.artifact.entries)} file(s) from "
            f"{pulled.ref}; {pulled.verdict.status.upper()}")
    return as_built(job, pulled)
