"""The verification run: both builds, every device, five parts, one verdict.

Order of work, after the new build exists and the working build was resolved:

1. artifacts: the kernel-artifact sets of both builds are collected again from their
   folders as they are now (a byte changed since a manifest was written counts), compared
   N/N, and with the committed reference of the same toolchain when there is one;
2. per device: one server of each build (working first) answers the recipe's prompts
   greedily and has its provenance checked. A working build whose server does not start
   stops the run (exit 10, no report: there is nothing to compare with); a new build
   whose server does not start fails the answers;
3. per device: the interleaved speed rounds of the bench (a fresh server per round; the
   caller holds the bench lock), added one at a time until decided or the budget is spent
   (:mod:`.speed_rounds`), each server's provenance checked while it runs; none at all when
   the request measures no speed (``--no-speed``: its speed part is not judged);
4. the verdict, the report files, the verdict as an in-toto statement (signed with the
   build's signing key when one is given: ``evidence.verdict``) and (``--junit``) the
   checks as JUnit XML.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from onebit_build.checking.artifacts import ArtifactSet, collect
from onebit_build.checking.manifest import ComponentRecord
from onebit_build.checking.references import find_matching_reference, load_reference
from onebit_build.checking.compare import SetComparison, compare_outputs, compare_sets
from onebit_build.core import ui
from onebit_build.core.errors import SmokeError, VerifyError
from onebit_build.core.fsutil import atomic_write_text, sha256_file
from onebit_build.spec.model_spec import served_name
from onebit_build.evidence.verdict import SIGNED as VERDICT_SIGNED, record as record_verdict
from onebit_build.running import server as srvmod
from onebit_build.running.server_args import ServerSpec
from onebit_build.verify_run.adopt_reference import adopt_reference
from onebit_build.verify_run.adopt_speed import adopt_smoke_speed
from onebit_build.verify_run import report as report_mod
from onebit_build.verify_run import speed as speed_mod
from onebit_build.verify_run.answers import Answer, AnswerComparison, compare
from onebit_build.running.devices import pick_devices
from onebit_build.running.junit import write_junit
from onebit_build.verify_run.mapped_files import Provenance, inspect_process
from onebit_build.verify_run.speed_rounds import METRICS, speed_on
from onebit_build.verify_run.verdict_junit import junit_cases
from onebit_build.verify_run.verdict import (SPEED_NOT_MEASURED, Part, RunVerdict, answers_part, artifacts_part,
                                               provenance_part, speed_not_measured, speed_part, verdict)
from onebit_build.verify_run.numerics_stage import numerics_stage
from onebit_build.verify_run.request import NEW, WORKING, RunRequest, Side
from onebit_build.verify_run.working import ResolvedBuild, server_component

SHOWN_LINES = 20  # details of a failed part printed at the end (all of them are in the report)
NO_SPEED_ADOPTED = "smoke speed not adopted: --no-speed measures no speed"


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    verdict: RunVerdict
    written: report_mod.Written
    junit: Path | None
    reference: Path | None  # written (or found unchanged) by --adopt
    adopted: str = ""  # what --adopt did
    statement: Path | None = None  # the verdict as an in-toto statement (signed when a key was given)


class HashCache:
    """sha256 of files, computed once per (path, device, inode, size, mtime) in a run: every
    round's server maps the same libraries."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, int, int, int, int], str] = {}

    def __call__(self, path: Path) -> str:
        st = os.stat(path)
        key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if key not in self._seen:
            self._seen[key] = sha256_file(path)
        return self._seen[key]


# --------------------------------------------------------------------------- artifacts


def _component_folder(build: ResolvedBuild, comp: ComponentRecord) -> Path:
    """Where a component of ``build`` is: the named folder for the server's component."""
    if comp is server_component(build.manifest):
        return build.folder
    return Path(comp.build_dir)


def _source_tree(build: ResolvedBuild, source: str) -> Path:
    return next((Path(s.tree) for s in build.manifest.sources if s.name == source), Path())


def collect_sets(build: ResolvedBuild) -> dict[tuple[str, str], ArtifactSet]:
    """The kernel-artifact sets the build's manifest names, collected again from its folders
    (an install prefix holds no build tree: there, the manifest's record)."""
    if build.installed:
        return build.manifest.artifact_sets()
    out = {}
    for comp in build.manifest.components:
        for recorded in comp.artifacts:
            out[(comp.name, recorded.kind)] = collect(recorded.kind, build_dir=_component_folder(build, comp),
                                                      source_dir=_source_tree(build, comp.source))
    return out


def output_hashes(build: ResolvedBuild, hasher: Callable[[Path], str]) -> list[dict[str, Any]]:
    """The outputs of the server's component as they are on disk now (name, size, sha256)."""
    comp = server_component(build.manifest)
    names = {o.name for o in comp.outputs} if comp else set()
    out = []
    for o in build.outputs:
        if o.name in names and o.path.is_file():
            out.append({"name": o.name, "size": o.path.stat().st_size, "sha256": hasher(o.path)})
    return out


def _relabel(c: SetComparison, label: str) -> SetComparison:
    return replace(c, label=label)


def artifacts_stage(req: RunRequest,
                    hasher: Callable[[Path], str]) -> tuple[Part, dict[str, Any], dict[tuple[str, str], ArtifactSet]]:
    """The artifacts part, the artifact lists for the bundle, and the working build's sets."""
    lists: dict[str, Any] = {}
    try:
        new_sets = collect_sets(req.new.build)
        old_sets = collect_sets(req.working.build)
    except VerifyError as exc:
        return Part(name="artifacts", ok=False, summary=f"the artifacts could not be collected: {exc}"), lists, {}
    lists = {side: {f"{k[0]}/{k[1]}": s.to_dict() for k, s in sets.items()}
             for side, sets in ((NEW, new_sets), (WORKING, old_sets))}
    kernel: list[SetComparison] = []
    for key in sorted(set(new_sets) | set(old_sets)):
        if key not in new_sets or key not in old_sets:
            which = NEW if key not in new_sets else WORKING
            return (Part(name="artifacts", ok=False,
                         summary=f"the {which} build records no {key[1]} artifacts for component {key[0]}"),
                    lists, old_sets)
        c = compare_sets(key[0], new_sets[key], old_sets[key])
        kernel.append(_relabel(c, f"{c.label} (new vs working)"))
    notes: list[str] = []
    if new_sets:
        ref_path, candidates = find_matching_reference(req.refs_dir, new_sets)
        if ref_path is None:
            notes.append(f"no committed reference in {req.refs_dir} matches this toolchain (candidates: "
                         f"{', '.join(candidates) or 'none'});"
                         " record one with verify-run --adopt")
        else:
            ref = load_reference(ref_path)
            for key, cur in sorted(new_sets.items()):
                if key in ref.sets:
                    c = compare_sets(key[0], cur, ref.sets[key])
                    kernel.append(_relabel(c, f"{c.label} (new vs {ref_path.parent.name}/{ref_path.name})"))
    outputs = [_relabel(compare_outputs(output_hashes(req.new.build, hasher), output_hashes(req.working.build, hasher)),
                        "output binaries (new vs working)")]
    part = artifacts_part(kernel, outputs)
    if notes:
        part = replace(part, lines=part.lines + tuple(f"note: {n}" for n in notes), data={**part.data, "notes": notes})
    return part, lists, old_sets


# --------------------------------------------------------------------------- devices, answers, provenance


def devices_to_compare(req: RunRequest) -> tuple[tuple[str, ...], dict[str, str]]:
    """The recipe's devices, and each optional device when both builds list it; an
    optional device only one build lists is not compared (and says why)."""
    spec = req.recipe.smoke
    if not spec.optional_devices:
        return spec.devices, {}
    listed = {s.role: srvmod.list_devices(s.build.server, env=req.env,
                                          log=req.run_dir / "logs" / f"list-devices-{s.role}.log")
              for s in req.sides}
    devices, left_out = pick_devices(spec, listed)
    # An optional device neither build lists is simply not there; one that one build lists is said.
    return devices, {dev: why for dev, why in left_out.items() if any(dev in names for names in listed.values())}


def _spec(req: RunRequest, side: Side, device: str, log: Path) -> ServerSpec:
    spec = req.recipe.smoke
    return ServerSpec(binary=side.build.server, model=req.model.path, log=log, device=device,
                             ctx_size=spec.ctx_size, threads=spec.threads, extra_args=side.args, env=req.env,
                             health_timeout_s=spec.health_timeout_s,
                             alias=served_name(req.recipe.model, sha256=req.model.sha256, file=req.model.path))


def _pieces(server: srvmod.Server, tokens: tuple[int, ...]) -> tuple[str, ...]:
    """The text of each token, one /detokenize per token."""
    out = []
    for t in tokens:
        status, data = server.post_json("/detokenize", {"tokens": [t]}, timeout=30)
        if status != 200 or not isinstance(data, dict) or not isinstance(data.get("content"), str):
            return tuple(out)
        out.append(data["content"])
    return tuple(out)


def _ask(server: srvmod.Server, text: str, tokens: int) -> Answer:
    try:
        c = server.complete(text, n_predict=tokens, return_tokens=True, timeout=300)
    except SmokeError as exc:
        return Answer(text="", error=exc.message)
    ids = tuple(c.tokens or ())
    return Answer(text=c.text, tokens=ids, pieces=_pieces(server, ids) if ids else ())


def _log_name(kind: str, role: str, device: str) -> str:
    return f"{kind}-{role}-{re.sub(r'[^A-Za-z0-9._+-]+', '_', device)}.log"


def answers_on(req: RunRequest, device: str,
               hasher: Callable[[Path], str]) -> tuple[dict[str, dict[str, Answer]], list[Provenance]]:
    """One server per build on ``device``, both started together and asked at the same time
    (greedy answers do not depend on timing): the recipe's prompts, and provenance. Raises
    SmokeError when the working build's server does not start."""
    answers: dict[str, dict[str, Answer]] = {}
    provs: dict[str, Provenance] = {}
    logs = {side.role: req.run_dir / "logs" / _log_name("answers", side.role, device) for side in req.sides}
    started = srvmod.start_together([_spec(req, side, device, logs[side.role]) for side in req.sides])
    serving = [(side, got) for side, got in zip(req.sides, started) if isinstance(got, srvmod.Server)]
    try:
        for side, got in zip(req.sides, started):
            if isinstance(got, srvmod.Server):
                provs[side.role] = inspect_process(got.pid, side=side.role, device=device,
                                                   expected=side.build.expected_files, hasher=hasher)
                continue
            if side.role == WORKING:
                raise SmokeError(f"the working build's llama-server did not start on {device}: {got.message}",
                                 hint="check the working build (its log is named above); verify-run needs a "
                                      "working build that serves") from None
            why = f"the new build's server did not start: {got.message}"
            answers[side.role] = {p.name: Answer(text="", error=why) for p in req.recipe.smoke.prompts}
            provs[side.role] = Provenance(side=side.role, device=device, pid=0, executable=str(side.build.server),
                                          checks=(), error=why)

        prompts = req.recipe.smoke.prompts
        got = srvmod.side_by_side([lambda server=server: {p.name: _ask(server, p.prompt, req.recipe.smoke.answer_tokens)
                                                          for p in prompts} for _, server in serving])
        for (side, _), one in zip(serving, got):  # _ask answers every error itself: None is a thread that died
            answers[side.role] = one or {p.name: Answer(text="", error="no answer: the request thread failed")
                                         for p in prompts}
    finally:
        for _, server in serving:
            server.stop()
    return {side.role: answers[side.role] for side in req.sides}, [provs[side.role] for side in req.sides]


# --------------------------------------------------------------------------- the run


def bundle_files(req: RunRequest, lists: dict[str, Any]) -> list[tuple[str, Path]]:
    """What the bundle holds besides the report: both manifests, the artifact lists, the
    logs, and the pins lock of the project the new build came from."""
    files: list[tuple[str, Path]] = [("manifests/new.json", req.new.build.manifest_path),
                                     ("manifests/working.json", req.working.build.manifest_path)]
    for side, doc in lists.items():
        path = req.run_dir / f"artifacts-{side}.json"
        atomic_write_text(path, json.dumps(doc, indent=2) + "\n")
        files.append((path.name, path))
    logs = req.run_dir / "logs"
    if logs.is_dir():
        files += [(f"logs/{p.name}", p) for p in sorted(logs.iterdir()) if p.is_file()]
    return files


Speeds = dict[tuple[str, str], speed_mod.SpeedVerdict]


def compare_on_devices(req: RunRequest, devices: tuple[str, ...], hasher: Callable[[Path], str],
                       times: dict[str, float]) -> tuple[list[AnswerComparison], list[Provenance], Speeds]:
    """Per device, the answers of both builds, then (when the new build answered) the speed
    rounds; with every server's provenance. The time of each step goes into ``times``
    (``answers/DEVICE``, ``speed/DEVICE``)."""
    comparisons: list[AnswerComparison] = []
    provs: list[Provenance] = []
    speeds: Speeds = {}
    for dev in devices:
        t0 = time.monotonic()
        with ui.stage("answers") as st:
            got, p = answers_on(req, dev, hasher)
            provs += p
            comparisons += [compare(dev, pr.name, new=got[NEW][pr.name], working=got[WORKING][pr.name])
                            for pr in req.recipe.smoke.prompts]
            same = sum(1 for c in comparisons if c.device == dev and c.same)
            st["note"] = f"{dev}: {same}/{len(req.recipe.smoke.prompts)} the same"
        times[f"answers/{dev}"] = time.monotonic() - t0
        if not req.measure_speed:
            continue
        if any(a.error for a in got[NEW].values()):
            for metric in METRICS:
                speeds[(dev, metric)] = speed_mod.speed_verdict([], tolerance=req.tolerance, rounds_asked=req.rounds)
            continue
        t0 = time.monotonic()
        with ui.stage("speed") as st:
            v, p = speed_on(req, dev, hasher)
            speeds.update(v)
            provs += p
            st["note"] = "; ".join(f"{dev} {m} {v[(dev, m)].label}" for m in METRICS)
        times[f"speed/{dev}"] = time.monotonic() - t0
    return comparisons, provs, speeds


def run_facts(req: RunRequest, *, devices: tuple[str, ...], started: str, seconds: float,
              adopted: str) -> report_mod.RunFacts:
    """What the report says about the run itself."""
    return report_mod.RunFacts(
        recipe=req.recipe.name, new={**req.new.build.to_dict(), "args": list(req.new.args)},
        working={**req.working.build.to_dict(), "args": list(req.working.args)}, rounds=req.rounds,
        tolerance=req.tolerance,
        devices=devices, started_at=started, seconds=seconds, run_dir=str(req.run_dir),
        model={"path": str(req.model.path), "sha256": req.model.sha256, "source": req.model.source},
        settings={"new server arguments": " ".join(req.new.args),
                  "working server arguments": " ".join(req.working.args),
                  "bench lock": str(req.lock or ""), "adopt": adopted,
                  **({"speed budget": f"{req.budget_s:g} s per device", "decode tokens": str(req.decode_tokens)}
                     if req.measure_speed else {"speed": SPEED_NOT_MEASURED})},
        speed_measured=req.measure_speed,
    )


def run(req: RunRequest, *, project_files: tuple[tuple[str, Path], ...] = ()) -> RunOutcome:
    """The whole run after the builds are known; the caller holds the workspace and bench locks."""
    speed_mod.check_rounds(req.rounds)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    hasher = HashCache()
    (req.run_dir / "logs").mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}
    with ui.stage("artifacts") as st:
        art, lists, working_sets = artifacts_stage(req, hasher)
        st["note"] = art.summary
        if not art.ok:
            st["status"] = "DIFFERENT"
    times["artifacts"] = time.monotonic() - t0
    devices, not_compared = devices_to_compare(req)
    comparisons, provs, speeds = compare_on_devices(req, devices, hasher, times)
    speed = speed_part(speeds) if req.measure_speed else speed_not_measured()
    t1 = time.monotonic()
    with ui.stage("numerics") as st:
        numerics = numerics_stage(req, devices)
        st["note"] = numerics.summary if numerics.judged else f"not checked: {numerics.summary}"
        if not numerics.ok:
            st["status"] = "DIFFERENT"
    times["numerics"] = time.monotonic() - t1
    parts = [art, answers_part(comparisons, not_compared=not_compared), speed, provenance_part(provs), numerics]
    result = verdict(parts)
    reference, adopted = None, ""
    if req.adopt:
        if art.ok:
            reference, adopted = adopt_reference(req, working_sets)
        else:
            adopted = "not adopted: the artifacts of the two builds differ; adopt only a pair that agrees"
        speeds_said = adopt_smoke_speed(req, devices) if req.measure_speed else [NO_SPEED_ADOPTED]
        adopted = "; ".join([adopted, *speeds_said])
    facts = run_facts(req, devices=devices, started=started, seconds=time.monotonic() - t0, adopted=adopted)
    written = report_mod.write_all(req.run_dir, result, facts, bundle_files=[*bundle_files(req, lists), *project_files])
    statement = record_verdict(run_dir=req.run_dir, report=written.json, new=req.new.build.manifest,
                               working=req.working.build.manifest, model=(req.model.path.name, req.model.sha256),
                               key=req.signing_key, scrub=req.scrub)
    junit = (write_junit(req.junit, "verify-run", junit_cases(result, recipe=req.recipe.name, times=times),
                         seconds=facts.seconds) if req.junit else None)
    return RunOutcome(verdict=result, written=written, junit=junit, reference=reference, adopted=adopted,
                      statement=statement)


def print_outcome(out: RunOutcome) -> None:
    """The verdict, each part on a line, and the paths of what was written."""
    ui.info("")
    ui.info(out.verdict.title)
    for p in out.verdict.parts:
        ui.info(f"  {p.name:<11} {p.status:<7} {p.summary}")
    for p in out.verdict.parts:
        if not p.ok and p.lines:
            ui.info(f"{p.name}:")
            for line in p.lines[:SHOWN_LINES]:
                ui.info(f"  {line}")
            if len(p.lines) > SHOWN_LINES:
                ui.info(f"  ... {len(p.lines) - SHOWN_LINES} more in the report")
    ui.info(f"report:  {out.written.md}")
    ui.info(f"json:    {out.written.json}")
    ui.info(f"bundle:  {out.written.bundle}")
    if out.statement:
        ui.info(f"signed:  {out.statement}" if out.statement.name == VERDICT_SIGNED
                else f"statement: {out.statement} (unsigned: no --signing-key or $ONEBIT_SIGNING_KEY)")
    if out.junit:
        ui.info(f"junit:   {out.junit}")
    if out.adopted:
        ui.info(f"adopt:   {out.adopted}")

