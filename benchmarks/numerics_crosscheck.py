"""The numerical check against upstream's own tool: the same text, model and context scored by
the tool (through llama-server, as smoke does) and by ``llama-perplexity`` built from the same
patched tree, and the figures of a second configuration (the K cache in q8_0 instead of f16)
against the first, from both.

    python benchmarks/numerics_crosscheck.py --server BUILD/bin/llama-server \\
        --perplexity OTHER/bin/llama-perplexity --model gemma-3-270m-q4_k_m.gguf --out DIR

llama-perplexity scores the second half of a chunk of ``--ctx`` tokens (the logits at
positions ctx/2 .. ctx-2); the tool's schedule is set to the same positions: one jump of
ctx/2 + 1 tokens, then ctx/2 - 2 single steps. Writes DIR/crosscheck.json and prints a table.
``--dry-run`` prints both sides' commands and the positions each scores (JSON) and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from onebit_build.spec.numerics_spec import NumericsSpec# noqa: E402
from onebit_build.running import numerics as nm  # noqa: E402
from onebit_build.running.numerics_ref import eval_text  # noqa: E402
from onebit_build.running.numerics_run import Runner  # noqa: E402

# The second configuration: a quantized K cache, a real and small numerical change.
VARIANT = ("-ctk", "q8_0")


def perplexity_args(binary: Path, model: Path, text: Path, ctx: int, ubatch: int, threads: int) -> list[str]:
    return [str(binary), "-m", str(model), "-f", str(text), "-c", str(ctx), "-b", str(ctx), "-ub", str(ubatch),
            "--chunks", "1", "-t", str(threads), "--device", "none", "-ngl", "0"]


def parse(out: str, patterns: dict[str, str]) -> dict[str, float]:
    found = {}
    for key, pat in patterns.items():
        m = re.search(pat, out)
        if m:
            found[key] = float(m.group(1))
    return found


def upstream(binary: Path, model: Path, text: Path, ctx: int, ubatch: int, threads: int, out_dir: Path) -> dict:
    base_file = out_dir / "base.kld"
    base = subprocess.run([*perplexity_args(binary, model, text, ctx, ubatch, threads),
                           "--kl-divergence-base", str(base_file)], capture_output=True, text=True, check=True)
    (out_dir / "perplexity-base.log").write_text(base.stdout + base.stderr)
    run = subprocess.run([*perplexity_args(binary, model, text, ctx, ubatch, threads), *VARIANT,
                          "--kl-divergence-base", str(base_file), "--kl-divergence"],
                         capture_output=True, text=True, check=True)
    log = run.stdout + run.stderr
    (out_dir / "perplexity-variant.log").write_text(log)
    figures = parse(log, {"ppl_base": r"Mean PPL\(base\)\s*:\s*([\d.]+)", "ppl": r"Mean PPL\(Q\)\s*:\s*([\d.]+)",
                          "ppl_ratio": r"Mean PPL\(Q\)/PPL\(base\)\s*:\s*([\d.]+)",
                          "kld_mean": r"Mean\s+KLD:\s*([-\d.]+)", "kld_p99": r"99\.0%\s+KLD:\s*([-\d.]+)",
                          "kld_max": r"Maximum KLD:\s*([-\d.]+)", "top1_pct": r"Same top p:\s*([\d.]+)"})
    figures["top1"] = figures.pop("top1_pct", float("nan")) / 100.0
    return figures


def tool_spec(ctx: int, ubatch: int) -> NumericsSpec:
    """The tool's schedule set to llama-perplexity's positions: one jump of ctx/2 + 1 tokens, then
    ctx/2 - 2 single steps."""
    return NumericsSpec(ubatch=ubatch, rounds=1, jump=ctx // 2 + 1, steps=ctx // 2 - 2, top_k=20)


def dry_run(a: argparse.Namespace, text_file: Path) -> int:
    """Print both sides' commands and the positions each scores (JSON); start nothing."""
    spec = tool_spec(a.ctx, a.ubatch)
    plan = nm.schedule(rounds=spec.rounds, jump=spec.jump, steps=spec.steps)
    base = perplexity_args(a.perplexity, a.model, text_file, a.ctx, a.ubatch, a.threads)
    print(json.dumps({
        "llama_perplexity": {"base": [*base, "--kl-divergence-base", str(a.out / "base.kld")],
                             "variant": [*base, *VARIANT, "--kl-divergence-base", str(a.out / "base.kld"),
                                         "--kl-divergence"],
                             "logit_positions": [a.ctx // 2, a.ctx - 2]},
        "onebit_build": {"server": str(a.server), "extra_args": [[], list(VARIANT)], "ubatch": spec.ubatch,
                         "logit_positions": [r.length - 1 for r in plan],
                         "tokens_needed": nm.tokens_needed(rounds=spec.rounds, jump=spec.jump, steps=spec.steps)},
    }, indent=2))
    return 0


def ours(server: Path, model: Path, text: str, ctx: int, ubatch: int, threads: int, out_dir: Path) -> dict:
    spec = tool_spec(ctx, ubatch)

    def runner(extra: tuple[str, ...]) -> Runner:
        return Runner(server_bin=server, model=model, spec=spec, ctx_size=ctx, threads=threads, env=(),
                      health_timeout_s=120, logs=out_dir, timeout_s=lambda r: 120 + r.batch, extra_args=extra,
                      log_tag="variant" if extra else "base")
    base, tokens = runner(()).run("CPU", "cpu", "0", text, None)
    variant, _ = runner(VARIANT).run("CPU", "cpu", "0", text, tokens)
    fig = nm.compare(base.scored, variant.scored)
    return {**fig.to_dict(), "positions": fig.positions, "batches": base.batches_note or "as planned"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", type=Path, required=True)
    p.add_argument("--perplexity", type=Path, required=True)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--ctx", type=int, default=256)
    p.add_argument("--ubatch", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dry-run", action="store_true",
                   help="print the commands and the positions each side scores (JSON); run nothing")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    text, sha = eval_text(HERE.parent / "smoke", "harbour.txt")
    text_file = a.out / "harbour.txt"
    text_file.write_text(text)
    if a.dry_run:
        return dry_run(a, text_file)
    up = upstream(a.perplexity, a.model, text_file, a.ctx, a.ubatch, a.threads, a.out)
    mine = ours(a.server, a.model, text, a.ctx, a.ubatch, a.threads, a.out)
    doc = {"text_sha256": sha, "ctx": a.ctx, "ubatch": a.ubatch, "threads": a.threads,
           "variant": " ".join(VARIANT), "llama_perplexity": up, "onebit_build": mine}
    (a.out / "crosscheck.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{'figure':<10} {'llama-perplexity':>18} {'onebit-build':>14}")
    for key in ("ppl_base", "ppl", "ppl_ratio", "kld_mean", "kld_p99", "kld_max", "top1"):
        print(f"{key:<10} {up.get(key, float('nan')):>18.6g} {mine.get(key, float('nan')):>14.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
