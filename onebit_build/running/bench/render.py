"""The bench's outputs: the Markdown table and its context, the versioned ``bench.json``
and the plot, written together by :func:`write_outputs`."""

from __future__ import annotations

import os
import platform
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onebit_build.core.fsutil import atomic_write_text, sha256_bytes, sha256_file, write_state
from onebit_build.running.bench.plan import completion_body
from onebit_build.running.bench.chart import fmt_speed, plot
from onebit_build.running.bench.run import BenchResult
from onebit_build.running.bench.settings import BENCH_KIND, BENCH_SCHEMA, DEFAULTS
from onebit_build.running.measure import Stat


# --------------------------------------------------------------------------- the table


def _pct(p: float | None, *, baseline: bool) -> str:
    if baseline:
        return "baseline"
    if p is None:
        return "n/a"
    return f"{p:+.1f}%"


def table_rows(result: BenchResult) -> list[list[str]]:
    base = result.request.baseline.name
    rows = []
    for p in result.request.prompts:
        for v in result.request.variants:
            c = result.cell(v.name, p.name)
            is_base = v.name == base
            if c.valid and c.decode and c.prompt_speed:
                rows.append([
                    p.name, v.name,
                    f"{fmt_speed(c.decode.best)} / {fmt_speed(c.decode.median)}",
                    _pct(c.decode_vs_base_pct, baseline=is_base),
                    f"{fmt_speed(c.prompt_speed.best)} / {fmt_speed(c.prompt_speed.median)}",
                    _pct(c.prompt_vs_base_pct, baseline=is_base),
                    f"ok; {c.note}" if c.note else "ok",
                ])
            else:
                rows.append([p.name, v.name, "INVALID", "-", "INVALID", "-", f"INVALID: {c.reason}"])
    return rows


TABLE_HEADER = ["prompt", "variant", "decode tok/s best / median", "decode vs base", "prompt tok/s best / median",
                "prompt vs base", "answer"]


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "\\n")


def table_lines(result: BenchResult) -> list[str]:
    """The Markdown table of the figures, one string a line."""
    rows = [[_md_escape(c) for c in r] for r in table_rows(result)]
    lines = ["| " + " | ".join(TABLE_HEADER) + " |", "|" + "|".join(["---"] * len(TABLE_HEADER)) + "|"]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def render_table(result: BenchResult) -> str:
    return "\n".join(table_lines(result)) + "\n"


def render_markdown(result: BenchResult, *, plot_name: str | None = None) -> str:
    req = result.request
    out = [
        "# llama-server bench",
        "",
        f"- model: `{req.model.path.name}` (sha256 {req.model.sha256[:16]})",
        f"- {req.rounds} rounds, interleaved; a fresh server per variant per round; one warm-up request;"
        f" greedy, prompt cache off, {req.decode_tokens} generated tokens per request",
        f"- baseline: `{req.baseline.name}`; figures are best / median over the rounds; vs base compares medians",
        f"- a figure counts only when its answer starts with the expected prefix (first {req.prefix_tokens} tokens of "
        "the baseline's round-1 answer unless given); a divergence is excused only at a near tie (the baseline's "
        f"runner-up token, margin below {req.tie_margin:g})",
        f"- started {result.started_at}, took {result.seconds:.0f} s",
        "",
        render_table(result),
        "## Variants",
        "",
        "| variant | build | device | server arguments |",
        "|---|---|---|---|",
    ]
    for v in req.variants:
        out.append(f"| {_md_escape(v.name)} | {_md_escape(v.build)} | {v.device} | "
                   f"`{_md_escape(shlex.join(v.args)) or '(none)'}` |")
    out += ["", "## Expected answer prefixes", ""]
    for p in req.prompts:
        e = result.expectations.get(p.name)
        out.append(f"- {p.name}: "
                   + (f"`{_md_escape(repr(e.text))}` ({e.source})" if e else "none (no reference answer)"))
        ties = e.near_ties(req.tie_margin) if e else []
        if ties:
            out.append("  near ties in it: " + "; ".join(
                f"token {i} {_md_escape(repr(st.text))} vs {_md_escape(repr(st.runner_up_text))} "
                f"(margin {st.margin:.3f})" for i, st in ties))
    failed = [s for s in result.servers if s.error]
    if failed:
        out += ["", "## Server problems", ""]
        out += [f"- round {s.round} {s.variant}: {s.error} (log `logs/{s.log.name}`)" for s in failed]
    if plot_name:
        out += ["", f"![decode and prompt speed]({plot_name})"]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- JSON


def _stat_doc(s: Stat | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"best": round(s.best, 3), "median": round(s.median, 3), "min": round(s.low, 3),
            "max": round(s.high, 3), "n": s.n}


def _round(x: float | None, n: int = 3) -> float | None:
    return None if x is None else round(x, n)


def bench_doc(result: BenchResult, *, outputs: dict[str, str]) -> dict[str, Any]:
    """``bench.json``'s body: settings, inputs, every server and sample, the results."""
    req = result.request
    return {
        "started_at": result.started_at,
        "seconds": round(result.seconds, 1),
        "all_valid": result.all_valid,
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(), "cpu_count": os.cpu_count()},
        "settings": _settings_doc(req),
        "model": {"path": str(req.model.path), "sha256": req.model.sha256, "source": req.model.source},
        "prompts": [{"name": p.name, "file": p.source, "chars": len(p.text), "sha256": sha256_bytes(p.text.encode())}
                    for p in req.prompts],
        "variants": _variants_doc(req),
        "expectations": {
            k: {"text": e.text, "tokens": e.tokens, "source": e.source,
                "steps": [{"id": st.id, "text": st.text, "runner_up": st.runner_up, "runner_up_text": st.runner_up_text,
                           "margin": _round(st.margin, 4)} for st in e.steps]}
            for k, e in result.expectations.items()
        },
        "servers": [
            {"round": s.round, "variant": s.variant, "log": str(s.log), "pid": s.pid, "port": s.port,
             "ready_s": _round(s.ready_s), "warmup_s": _round(s.warmup_s), "error": s.error}
            for s in result.servers
        ],
        "samples": [
            {"round": s.round, "variant": s.variant, "prompt": s.prompt, "prompt_n": s.prompt_n,
             "predicted_n": s.predicted_n,
             "prompt_tok_s": _round(s.prompt_tok_s), "decode_tok_s": _round(s.decode_tok_s), "valid": s.valid,
             "why": s.why, "note": s.note, "text": s.text}
            for s in result.samples
        ],
        "results": [
            {"variant": c.variant, "prompt": c.prompt, "valid": c.valid, "reason": c.reason, "note": c.note,
             "decode_tok_s": _stat_doc(c.decode), "prompt_tok_s": _stat_doc(c.prompt_speed),
             "decode_vs_baseline_pct": _round(c.decode_vs_base_pct, 2),
             "prompt_vs_baseline_pct": _round(c.prompt_vs_base_pct, 2)}
            for c in result.cells
        ],
        "outputs": outputs,
    }


def _settings_doc(req) -> dict[str, Any]:
    return {
        "rounds": req.rounds,
        "order": "interleaved",
        "decode_tokens": req.decode_tokens,
        "prefix_tokens": req.prefix_tokens,
        "tie_margin": req.tie_margin,
        "warmup_tokens": min(DEFAULTS.warmup_tokens, req.decode_tokens),
        "ctx_size": req.ctx_size,
        "request": {k: v for k, v in completion_body("", 0).items() if k not in ("prompt", "n_predict")},
        "lock": str(req.lock) if req.lock else None,
        "env": dict(req.env),
    }


def _variants_doc(req) -> list[dict[str, Any]]:
    """Each variant with the sha256 of its server binary ("" when it cannot be read)."""
    hashes: dict[Path, str] = {}
    for v in req.variants:
        if v.server not in hashes:
            try:
                hashes[v.server] = sha256_file(v.server)
            except OSError:
                hashes[v.server] = ""
    return [{"name": v.name, "baseline": i == 0, "config": v.config, "build": v.build, "device": v.device,
             "server": str(v.server), "server_sha256": hashes[v.server], "args": list(v.args)}
            for i, v in enumerate(req.variants)]


# --------------------------------------------------------------------------- outputs


@dataclass(frozen=True, kw_only=True)
class BenchOutputs:
    json: Path
    table: Path
    plot: Path | None  # None: matplotlib (the plot extra) is not installed


def write_outputs(result: BenchResult, run_dir: Path) -> BenchOutputs:
    """``bench.json`` (versioned), ``bench.md`` (the table and its context) and ``bench.png``."""
    run_dir = Path(run_dir)
    png = plot(result, run_dir / "bench.png")
    md = run_dir / "bench.md"
    atomic_write_text(md, render_markdown(result, plot_name=png.name if png else None))
    js = run_dir / "bench.json"
    write_state(js, BENCH_KIND, BENCH_SCHEMA,
                bench_doc(result, outputs={"table": md.name, "plot": png.name if png else None}))
    return BenchOutputs(json=js, table=md, plot=png)
