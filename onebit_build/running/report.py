"""The smoke report: ``report.json`` (versioned, for tools) and ``report.md`` (for a person),
plus a short summary on the terminal."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from onebit_build import __version__

from onebit_build.core import ui
from onebit_build.spec.recipe import Recipe
from onebit_build.core.fsutil import atomic_write_text, write_state
from onebit_build.running.measure import Sample
from onebit_build.running import numerics as nm
from onebit_build.running.smoke import DeviceResult, SmokeResult
from onebit_build.running.smoke_checks import SmokeCheck, Speed

REPORT_KIND = "onebit-smoke-report"
REPORT_SCHEMA = 1
PASS_MARK = "✅ pass"
FAIL_MARK = "❌ FAIL"


# --------------------------------------------------------------------------- JSON


def _rel(path: Path | None, base: Path) -> str | None:
    if path is None:
        return None
    try:
        return Path(os.path.relpath(path, base)).as_posix()
    except ValueError:
        return str(path)


def _check_doc(c: SmokeCheck) -> dict[str, Any]:
    return {"name": c.name, "device": c.device, "passed": c.passed, "summary": c.summary, "evidence": c.evidence}


def _sample_doc(s: Sample | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "prompt_tok_s": s.prompt_tok_s,
        "decode_tok_s": s.decode_tok_s,
        "prompt_n": s.prompt_n,
        "predicted_n": s.predicted_n,
        "answer_ok": s.valid,
        "why": s.why,
        "text": s.text,
    }


def _speed_doc(s: Speed | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "prompt": s.prompt,
        "tokens": s.tokens,
        "valid": s.valid,
        "reason": s.reason,
        "prompt_tok_s": s.prompt_tok_s,
        "decode_tok_s": s.decode_tok_s,
        "first_token_s": s.first_token_s,
        "reference_tok_s": s.reference_tok_s,
        "tolerance": s.tolerance,
        "on_par": s.on_par,
        "workload": s.workload,
        "reference_note": s.reference_note,
        "warmup": _sample_doc(s.warmup),
        "samples": [_sample_doc(x) for x in s.samples],
    }


def environment(recipe: Recipe) -> dict[str, Any]:
    return {
        "onebit_build": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "smoke_env": dict(recipe.smoke.env),
    }


def report_doc(run_dir: Path, *, recipe: Recipe, smoke: SmokeResult, manifest: dict | None,
               extra: dict | None) -> dict[str, Any]:
    """The payload of report.json (without ``kind``/``schema``, which write_state adds)."""
    checks = smoke.all_checks
    return {
        "result": "pass" if smoke.passed else "fail",
        "passed": smoke.passed,
        "checks_passed": sum(c.passed for c in checks),
        "checks_total": len(checks),
        "started_at": smoke.started_at,
        "seconds": round(smoke.seconds, 3),
        "recipe": {
            "name": recipe.name,
            "description": recipe.description,
            "backends": list(recipe.backends),
            "devices": list(recipe.smoke.devices),
            "prompts": [{"name": p.name, "prompt": p.prompt, "expect": p.expect} for p in recipe.smoke.prompts],
            "answer_tokens": recipe.smoke.answer_tokens,
            "speed_tokens": recipe.smoke.speed_tokens,
            "speed_repeats": recipe.smoke.speed_repeats,
            "reference_tok_s": dict(recipe.smoke.reference_tok_s),
            "tolerance": recipe.smoke.tolerance,
        },
        "server": {"binary": str(smoke.server_bin), "expect_commit": smoke.expect_commit},
        "model": {"path": str(smoke.model.path), "sha256": smoke.model.sha256, "source": smoke.model.source},
        "manifest": manifest,
        "compiler_cache": compiler_cache_rows(manifest),
        "devices_expected": list(smoke.devices_expected),
        "devices_listed": None if smoke.devices_listed is None else list(smoke.devices_listed),
        "checks": [_check_doc(c) for c in checks],
        "devices": [
            {
                "device": d.device,
                "passed": d.passed,
                "seconds": round(d.seconds, 3),
                "port": d.port,
                "server_stopped_by": d.stopped_by,
                "log": _rel(d.log, run_dir),
                "speed": _speed_doc(d.speed),
            }
            for d in smoke.device_results
        ],
        "numerics": _numerics_doc(smoke, run_dir),
        "logs": {"list_devices": "logs/list-devices.log"},
        "environment": environment(recipe),
        "extra": extra or {},
    }


def compiler_cache_rows(manifest: dict | None) -> list[dict[str, Any]]:
    """What the compiler cache did for each component of the build (none recorded in older
    manifests). Pure."""
    rows = []
    for comp in (manifest or {}).get("components", []):
        cache = comp.get("compiler_cache") or {}
        if not cache:
            continue
        rows.append({"component": comp.get("name"), "launcher": cache.get("launcher"), "version": cache.get("version"),
                     "backend": cache.get("backend"), "url": cache.get("url"), "stats": cache.get("stats"),
                     "note": cache.get("note") or "; ".join(cache.get("warnings") or []) or None})
        if cache.get("dist"):
            rows.append({"component": comp.get("name"), "launcher": "sccache-dist", "version": None,
                         "backend": "scheduler", "url": cache["dist"].get("scheduler"), "stats": None,
                         "note": dist_note(cache["dist"])})
        shader = cache.get("shader_cache") or {}
        if shader.get("launcher") == "glslc-cache":
            note = "; ".join([*(shader.get("warnings") or []), *(shader.get("errors") or [])])
            rows.append({"component": comp.get("name"), "launcher": "glslc-cache", "version": None,
                         "backend": shader.get("backend"), "url": shader.get("url") or shader.get("cache_dir"),
                         "stats": shader.get("stats"), "note": note or None})
    return rows


def dist_note(d: dict) -> str:
    """What distribution did, in one cell: compiles per build server, failures, spot-checks. Pure."""
    servers = d.get("dist_compiles") or {}
    checks = d.get("spot_checks") or {}
    parts = [", ".join(f"{n} on {s}" for s, n in servers.items()) or "no remote compile",
             f"{d.get('dist_errors', 0)} failed remotely",
             f"{checks.get('identical', 0)}/{checks.get('checked', 0)} spot-checked objects identical"]
    if d.get("stopped"):
        parts.append(f"stopped: {d['stopped']}")
    if d.get("compiled_again_here"):
        parts.append(f"{len(d['compiled_again_here'])} compiled again here")
    return "; ".join(parts)


def _cache_section(manifest: dict | None) -> list[str]:
    rows = compiler_cache_rows(manifest)
    if not rows:
        return []
    out = ["", "## Compiler cache", "", "| component | launcher | backend | requests | hits | "
                                        "misses | hit rate | note |",
           "|---|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        s = r["stats"] or {}
        rate = s.get("hit_rate")
        launcher = " ".join(str(x) for x in (r["launcher"], r["version"]) if x)
        backend = " ".join(str(x) for x in (r["backend"], r["url"]) if x) or "—"
        out.append(f"| {md_cell(r['component'])} | {md_cell(launcher)} | {md_cell(backend)} | "
                   f"{s.get('requests', '—')} | "
                   f"{s.get('hits', '—')} | {s.get('misses', '—')} | {'—' if rate is None else f'{rate:.0%}'} | "
                   f"{md_cell(r['note'] or '')} |")
    return out


# --------------------------------------------------------------------------- Markdown


def md_cell(value: Any) -> str:
    """Text safe inside one Markdown table cell."""
    text = "" if value is None else str(value)
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", "")
    return text.replace("\n", "⏎")


def _mark(ok: bool) -> str:
    return PASS_MARK if ok else FAIL_MARK


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}"


def _first_token(d: DeviceResult) -> str:
    """The streamed chat's time to its first token, in seconds, from its check."""
    found = next((c.evidence.get("first_token_s") for c in d.checks if c.name == "stream" and c.passed), None)
    return "—" if found is None else f"{found:.2f}"


def _speed_cells(d: DeviceResult) -> tuple[str, str, str]:
    s = d.speed
    if s is None:
        return "—", "—", "not measured"
    if not s.valid:
        return "invalid", "invalid", md_cell(s.reason)
    ref = md_cell(s.reference_note or "no reference") if s.reference_tok_s is None else (
        f"{'on par with' if s.on_par else 'below'} {s.reference_tok_s:g} (±{s.tolerance:.0%})"
    )
    return _fmt(s.prompt_tok_s), _fmt(s.decode_tok_s), ref


def render_markdown(run_dir: Path, *, recipe: Recipe, smoke: SmokeResult, manifest: dict | None) -> str:
    checks = smoke.all_checks
    n_ok = sum(c.passed for c in checks)
    out: list[str] = []
    out.append(f"# Smoke report: recipe `{recipe.name}`: {'PASS' if smoke.passed else 'FAIL'}")
    out.append("")
    out.append(f"{n_ok} of {len(checks)} checks passed in {smoke.seconds:.1f} s (started {smoke.started_at}).")
    out.append("")
    out.append(f"- llama-server: `{smoke.server_bin}` (expected commit `{smoke.expect_commit}`)")
    out.append(f"- model: `{smoke.model.path.name}` sha256 `{smoke.model.sha256}` from {smoke.model.source}")
    out.append(f"- devices expected: {', '.join(smoke.devices_expected)}; listed by the binary: "
               + ("(--list-devices failed)" if smoke.devices_listed is None
                  else (', '.join(smoke.devices_listed) or 'none besides the CPU')))
    out.append("- logs: [list-devices](logs/list-devices.log)"
               + "".join(f", [{d.device}]({_rel(d.log, run_dir)})" for d in smoke.device_results if d.log is not None))
    if manifest:
        flat = {k: v for k, v in manifest.items() if isinstance(v, (str, int, float, bool))}
        if flat:
            out.append("- manifest: " + ", ".join(f"{k} `{v}`" for k, v in flat.items()))
    out.append("")
    out.append("## Devices")
    out.append("")
    out.append("| device | result | prompt tok/s | decode tok/s | first token s | speed note | log |")
    out.append("|---|---|---:|---:|---:|---|---|")
    for d in smoke.device_results:
        pps, dps, note = _speed_cells(d)
        log = f"[log]({_rel(d.log, run_dir)})" if d.log is not None else "—"
        out.append(f"| {md_cell(d.device)} | {_mark(d.passed)} | {pps} | {dps} | {_first_token(d)} | {note} | {log} |")
    out.append("")
    out.append("## Run checks")
    out.append("")
    out.append("| check | result | evidence |")
    out.append("|---|---|---|")
    for c in smoke.checks:
        out.append(f"| {md_cell(c.name)} | {_mark(c.passed)} | {md_cell(c.summary)} |")
    for d in smoke.device_results:
        out.extend(_device_section(d))
    out.extend(_numerics_section(smoke, run_dir))
    out.extend(_cache_section(manifest))
    out.append("")
    return "\n".join(out)


def _numerics_doc(smoke: SmokeResult, run_dir: Path) -> dict[str, Any] | None:
    """The numerical check in report.json: the workload, the reference, and per run its base,
    figures (per position too) and budget. Pure."""
    num = smoke.numerics
    if num is None:
        return None
    figs = {(d, lvl): f for d, lvl, f in num.figures}
    runs = []
    for r in num.runs:
        f = figs.get((r.device, r.level))
        runs.append({"device": r.device, "level": r.level, "layers": r.layers, "seconds": round(r.seconds, 3),
                     "log": _rel(r.log, run_dir), "ppl": round(nm.perplexity(r.scored), 6),
                     "batches": r.batches_note or "as planned",
                     "against": None if f is None else ("reference" if r.level == "cpu" else "CPU"),
                     "figures": None if f is None else f.to_dict(per_position=True)})
    return {"workload": num.workload, "reference": num.reference, "runs": runs,
            "passed": all(c.passed for c in num.checks)}


def _numerics_section(smoke: SmokeResult, run_dir: Path) -> list[str]:
    num = smoke.numerics
    if num is None:
        return []
    wl = num.workload
    out = ["", f"## Numerical check: {'pass' if all(c.passed for c in num.checks) else 'FAIL'}", "",
           f"Text `{wl.get('text')}` (sha256 `{str(wl.get('text_sha256'))[:16]}`), -ub {wl.get('ubatch')}, "
           f"{wl.get('rounds')} rounds of a {wl.get('jump')}-token batch and {wl.get('steps')} single tokens, "
           f"top-{wl.get('top_k')}; reference: `{num.reference or 'none'}`.", "",
           "| device | offload | against | ppl | ppl ratio | KLD mean | KLD p99 | KLD max | top-1 | s |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    figs = {(d, lvl): f for d, lvl, f in num.figures}
    for r in num.runs:
        f = figs.get((r.device, r.level))
        level = "—" if r.level == "cpu" else f"{r.level} (-ngl {r.layers})"
        if f is None:
            out.append(f"| {md_cell(r.device)} | {level} | — | {nm.perplexity(r.scored):.4f} | — | — | — | — | — | "
                       f"{r.seconds:.1f} |")
            continue
        against = "reference" if r.level == "cpu" else "CPU"
        out.append(f"| {md_cell(r.device)} | {level} | {against} | {f.ppl:.4f} | {f.ppl_ratio:.5f} | "
                   f"{f.kld_mean:.3g} | {f.kld_p99:.3g} | {f.kld_max:.3g} | {f.top1:.1%} | {r.seconds:.1f} |")
    out += ["", "| check | result | evidence |", "|---|---|---|"]
    for c in num.checks:
        out.append(f"| {md_cell(c.name)} ({md_cell(c.device or '')}) | {_mark(c.passed)} | {md_cell(c.summary)} |")
    if (run_dir / "numerics.png").exists():
        out += ["", "![KL divergence per position](numerics.png)"]
    return out


def _device_section(d: DeviceResult) -> list[str]:
    """One device's checks, the log tails of its failed ones and its timed requests."""
    out = ["", f"## {d.device}: {'pass' if d.passed else 'FAIL'} ({d.seconds:.1f} s)", "",
           "| check | result | evidence |", "|---|---|---|"]
    for c in d.checks:
        out.append(f"| {md_cell(c.name)} | {_mark(c.passed)} | {md_cell(c.summary)} |")
    tails = [c for c in d.checks if not c.passed and c.evidence.get("log_tail")]
    for c in tails:
        out += ["", f"Log tail for `{c.name}`:", "", "```"]
        out.extend(str(c.evidence["log_tail"]).splitlines()[-20:])
        out.append("```")
    if d.speed is not None and d.speed.samples:
        out += ["", f"Timed requests (prompt `{d.speed.prompt}`, {d.speed.tokens} tokens each, after one warm-up):", "",
                "| # | prompt tok/s | decode tok/s | tokens | answer | text |", "|---:|---:|---:|---:|---|---|"]
        for i, s in enumerate(d.speed.samples, 1):
            ans = "ok" if s.valid else f"FAIL: {s.why}"
            out.append(f"| {i} | {_fmt(s.prompt_tok_s)} | {_fmt(s.decode_tok_s)} | {s.predicted_n} | {md_cell(ans)} | "
                       f"{md_cell(s.text[:80])} |")
    return out


# --------------------------------------------------------------------------- entry points


def write_report(
    run_dir: Path,
    *,
    recipe: Recipe,
    smoke: SmokeResult,
    manifest: dict | None,
    extra: dict | None = None,
) -> tuple[Path, Path]:
    """Write ``run_dir/report.json`` and ``run_dir/report.md``; return their paths."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    json_path = run_dir / "report.json"
    md_path = run_dir / "report.md"
    write_state(json_path, REPORT_KIND, REPORT_SCHEMA,
                report_doc(run_dir, recipe=recipe, smoke=smoke, manifest=manifest, extra=extra))
    text = render_markdown(run_dir, recipe=recipe, smoke=smoke, manifest=manifest)
    chat = (extra or {}).get("chat")
    if chat and chat != "checked":
        text += f"\n## Chat endpoint\n\n{chat}\n"
    atomic_write_text(md_path, text)
    return json_path, md_path


def summary_lines(smoke: SmokeResult) -> list[str]:
    """A few lines for the terminal: one per device, the failed checks, the verdict."""
    lines: list[str] = []
    for c in smoke.checks:
        if not c.passed:
            lines.append(f"  FAIL {c.summary}")
    for d in smoke.device_results:
        answers = [c for c in d.checks if c.name.startswith("answer:")]
        n_ans = sum(c.passed for c in answers)
        s = d.speed
        if s is not None and s.valid:
            speed = f"decode {s.decode_tok_s:.1f} tok/s, prompt {s.prompt_tok_s:.1f} tok/s"
            speed += f", first token {_first_token(d)} s" if _first_token(d) != "—" else ""
        elif s is not None:
            speed = "speed invalid"
        else:
            speed = "speed not measured"
        lines.append(f"  {d.device:<8} {'pass' if d.passed else 'FAIL'}  answers {n_ans}/{len(answers)}, {speed}")
        for c in d.checks:
            if not c.passed:
                lines.append(f"    FAIL {c.summary}")
    checks = smoke.all_checks
    lines.append(
        f"smoke {'PASS' if smoke.passed else 'FAIL'}: {sum(c.passed for c in checks)}/{len(checks)} checks "
        f"in {smoke.seconds:.1f} s"
    )
    return lines


def print_summary(smoke: SmokeResult) -> None:
    """The per-device lines (stderr), then the verdict line on stdout (kept with -q)."""
    *lines, verdict = summary_lines(smoke)
    for line in lines:
        ui.info(line)
    ui.answer(verdict)
