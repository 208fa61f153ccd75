"""``publish`` and ``install --from``: a verified build into an OCI registry, and one out of it
into a prefix.

``publish`` builds if needed, verifies the build against the committed reference of its
toolchain (NOT VERIFIED stops it; UNVERIFIED needs ``--allow-unverified``), and pushes the
install tree (what ``install`` would put into a prefix), the build manifest and the provenance
and SBOM files beside it as one artifact tagged ``<recipe>-<key>`` (and the user's tag, if
given). It refuses to publish a tree with a file under ``bin/`` that is no output of the
manifest: a consumer could not check it against a reference.

``install --from`` pulls the build this plan asks for (:func:`onebit_build.job.pull.pull`),
and installs exactly its files; with ``--check`` it also builds here and compares every output
first. A registry that cannot be reached, or holds no build of this plan, is one line and a
build here; a build that is refused stops the install with the prefix as it was.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from onebit_build.distribution.binary_cache import (CARRIED, BinaryArtifact, Entry, config_bytes, entry_of,
                                                    manifest_doc, path_ok, tag_of)
from onebit_build.distribution.install import MANIFEST_REL, Item, install_items, install_items_into
from onebit_build.checking.manifest import load_manifest
from onebit_build.distribution.oci import Registry, RegistryUnreachable
from onebit_build.distribution.oci_ref import OciRef
from onebit_build.core import ui
from onebit_build.core.errors import BuildError, NotAvailableError, VerifyError
from onebit_build.core.fsutil import write_state
from onebit_build.evidence.floor import check_outputs, write_packages
from onebit_build.job.pull import Pulled, files_are_outputs, plan_key, pull
from onebit_build.job.build import Built
from onebit_build.job.job import Job
from onebit_build.job.run import run
from onebit_build.job.stage import Stage

ORIGIN_KIND = "onebit-build/binary-cache-origin"
ORIGIN_REL = Path("share") / "onebit-build" / "binary-cache.json"


def publish(job: Job, ref: OciRef, *, allow_unverified: bool) -> str:
    """Build and verify if needed, then push the build; returns the artifact's digest."""
    done = run(job, Stage.VERIFY)
    built, verdict = done.built, done.verified
    assert built is not None and verdict is not None  # a job run up to verify has built and verified
    if verdict.status != "verified" and not allow_unverified:
        raise VerifyError(f"the build is {verdict.status.upper()}: {verdict.detail}",
                          hint="only a verified build is published; pass --allow-unverified to publish it all the "
                               "same (its artifact says so)")
    key = build_key(job, built)
    entries, sources = publish_entries(job, built)
    check_publishable(job, entries, built)
    verified = "verified" if verdict.status == "verified" else f"{verdict.status} (--allow-unverified)"
    config = config_bytes(recipe=job.recipe.name, key=key, verified=verified)
    doc = manifest_doc(entries, recipe=job.recipe.name, key=key, verified=verified, config=config,
                       created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    body = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    tags = list(dict.fromkeys([tag_of(job.recipe.name, key), *([ref.tag] if ref.tag else [])]))
    t0 = time.monotonic()
    with Registry(ref, push=True) as reg:
        sent = 0
        for e in {e.digest: e for e in entries}.values():
            if not reg.has_blob(e.digest):
                reg.upload(e.digest, e.size, _opener(e, sources))
                sent += e.size
        reg.upload(doc["config"]["digest"], len(config), lambda: config)
        digest = ""
        for tag in tags:
            digest = reg.put_manifest(tag, body)
    ui.info(f"{'publish':<8} ok ({time.monotonic() - t0:.1f} s)  {len(entries)} file(s), {sent / 1e6:.1f} MB sent; "
            f"tags {', '.join(tags)}")
    ui.answer(str(ref.with_tag(tags[0]).at(digest)))
    return digest


def build_key(job: Job, built: Built) -> str:
    """The portable key of the build in hand; the plan's folders must be the build's."""
    if [c.build_dir for c in job.plan.components] != [str(b.build_dir) for b in built.builds]:
        raise BuildError("the plan resolves to other build folders than the build just made",
                         hint="run 'onebit-build plan' and 'onebit-build build' and compare; report it as a bug")
    return plan_key(job)


def publish_entries(job: Job, built: Built) -> tuple[list[Entry], dict[str, Path]]:
    """The entries of the install tree plus the provenance and SBOM files beside the manifest
    (the build folder's, then this run's), and the file each entry's bytes come from."""
    items = install_items(built.builds, built.manifest)
    seen = {it.rel.name for it in items if it.rel.parent == Path("share/onebit-build")}
    for folder in (built.manifest.parent, job.run_dir):
        for pattern in CARRIED:
            for path in sorted(folder.glob(pattern)):
                if path.is_file() and not path.is_symlink() and path.name not in seen:
                    seen.add(path.name)
                    items.append(Item(source=path, rel=Path("share/onebit-build") / path.name))
    entries = [entry_of(it.source, it.rel.as_posix()) for it in items]
    return entries, {e.rel: it.source for e, it in zip(entries, items)}


def check_publishable(job: Job, entries: list[Entry], built: Built) -> None:
    """Everything a consumer will check, checked before a byte is sent."""
    bad = [e.rel for e in entries if not path_ok(e.rel)]
    if bad:
        raise BuildError(f"cannot publish {bad[0]}: not a plain file name under bin/ or share/onebit-build/",
                         hint="give the recipe's outputs plain file names")
    names = {e.rel for e in entries}
    for e in entries:
        if e.link is not None and f"{Path(e.rel).parent}/{e.link}" not in names:
            raise BuildError(f"cannot publish {e.rel}: a link to {e.link!r}, which is not beside it in the tree",
                             hint="report it as a bug")
    art = BinaryArtifact(recipe=job.recipe.name, key="", entries=tuple(entries))
    try:
        files_are_outputs(art, load_manifest(built.manifest), "this build")
    except VerifyError as exc:
        raise BuildError(f"cannot publish: {exc.message}",
                         hint="declare every file the install carries as an output of the recipe") from None


def _opener(e: Entry, sources: dict[str, Path]):
    if e.link is not None:
        data = e.link.encode()
        return lambda: data
    return lambda: open(sources[e.rel], "rb")


# --------------------------------------------------------------------------- install --from


def install_from(job: Job, ref: OciRef, prefix: Path, *, check: bool, allow_unverified: bool,
                 system_root: Path | None = None) -> list[Path]:
    """Pull this plan's build from ``ref`` and install its files into ``prefix`` (with
    ``check``: build here first and compare); a registry that cannot serve it means a build
    here and an install of that, after one line."""
    try:
        pulled = pull(job, ref, allow_unverified=allow_unverified)
        if pulled is None:
            raise NotAvailableError(f"no build of this plan in {ref}")
    except (RegistryUnreachable, NotAvailableError) as exc:
        ui.warn(f"binary cache: {exc.message}; building here")
        built = run(job, Stage.BUILD).built
        assert built is not None  # a job run up to the build has built
        check_outputs([o.path for b in built.builds for o in b.outputs], built.manifest, root=system_root)
        packages = write_packages(job.run_dir, built.manifest, [o.path for b in built.builds for o in b.outputs])
        return install_items_into(install_items(built.builds, built.manifest, [packages] if packages else []),
                                  prefix, built.builds)
    ui.info(f"{'binary':<8} ok  {len(pulled.artifact.entries)} file(s) from {pulled.ref}; "
            f"{pulled.verdict.status.upper()}: {pulled.verdict.detail}")
    # Before anything is written into the prefix: a build this system cannot run is refused.
    check_outputs(list((pulled.folder / "bin").iterdir()), pulled.folder / MANIFEST_REL, root=system_root)
    if check:
        compare_with_local(job, pulled)
    return install_items_into(pulled_items(job, pulled), prefix)


def compare_with_local(job: Job, pulled: Pulled) -> None:
    """Build here (as ``build`` would) and compare every output with the pulled one."""
    built = run(job, Stage.BUILD).built
    assert built is not None  # a job run up to the build has built
    here = {o.path.name: o.sha256 for b in built.builds for o in b.outputs if o.path.is_file()}
    there = {e.rel[4:]: e.digest[7:] for e in pulled.artifact.entries if e.rel.startswith("bin/") and e.link is None}
    differing = sorted(n for n in there if here.get(n) != there[n])
    if differing:
        name = differing[0]
        raise VerifyError(f"--check: {len(differing)} of {len(there)} pulled output(s) differ from the build here; "
                          f"first {name} (pulled {there[name][:16]}, here {str(here.get(name, 'not built'))[:16]})",
                          hint=f"nothing was installed; the build here is in {built.builds[-1].build_dir}")
    ui.info(f"{'check':<8} ok  {len(there)}/{len(there)} pulled output(s) byte-identical to the build here")


def pulled_items(job: Job, pulled: Pulled) -> list[Item]:
    """Every file of the pulled build as it was published, and a record of where it came from."""
    items = [Item(source=pulled.folder / e.rel, rel=Path(e.rel), link=e.link is not None)
             for e in pulled.artifact.entries]
    packages = write_packages(job.run_dir, pulled.folder / MANIFEST_REL, (pulled.folder / "bin").iterdir())
    items += [Item(source=packages, rel=MANIFEST_REL.parent / packages.name)] if packages else []
    origin = job.run_dir / "binary-cache.json"
    write_state(origin, ORIGIN_KIND, 1, {"from": str(pulled.ref), "key": pulled.key,
                                          "accepted": pulled.verdict.status, "detail": pulled.verdict.detail})
    return [*items, Item(source=origin, rel=ORIGIN_REL)]
