"""The measurements the numerical check's budgets come from: the default recipe's scoring run
repeated on the CPU (1 and 2 threads, each twice) and, where the build offers them, on other
devices at every offload level, each judged against the first CPU run, with the time of
each run.

    python benchmarks/numerics_budgets.py --server BUILD/bin/llama-server --model MODEL.gguf \\
        [--recipe recipes/default.yaml] [--device Vulkan0] --out DIR

Writes DIR/budgets.json and prints one line per run (docs/smoke.md records the figures).
``--dry-run`` prints the planned runs (JSON) and starts no server.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from onebit_build.spec.recipe import load_recipe# noqa: E402
from onebit_build.spec.pins import load_pins# noqa: E402
from onebit_build.running import numerics as nm  # noqa: E402
from onebit_build.running.gguf import block_count  # noqa: E402
from onebit_build.running.numerics_ref import eval_text  # noqa: E402
from onebit_build.running.numerics_run import Runner, levels_of  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", type=Path, required=True)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--recipe", type=Path, default=HERE.parent / "recipes" / "default.yaml")
    p.add_argument("--device", action="append", default=[], help="a device besides the CPU (repeatable)")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE for the servers (repeatable)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dry-run", action="store_true", help="print the planned runs (JSON); start no server")
    a = p.parse_args()
    recipe = load_recipe(a.recipe, load_pins(HERE.parent / "pins.yaml"))
    spec = recipe.numerics
    assert spec is not None, f"{a.recipe} has no numerics section"
    text, text_sha = eval_text(HERE.parent / "smoke", spec.text)
    env = tuple(tuple(e.split("=", 1)) for e in a.env) or recipe.smoke.env
    a.out.mkdir(parents=True, exist_ok=True)

    def runner(threads: int, tag: str) -> Runner:
        return Runner(server_bin=a.server, model=a.model, spec=spec, ctx_size=recipe.smoke.ctx_size, threads=threads,
                      env=env, health_timeout_s=600, logs=a.out, log_tag=tag,
                      timeout_s=lambda r: 600 + r.batch)

    rows = []
    base = None
    tokens = None
    plan = [("CPU", "cpu", "0", t, f"t{t}-r{r}") for t in (1, 2) for r in (1, 2)]
    plan += [(dev, level, ngl, recipe.smoke.threads or 1, dev) for dev in a.device
             for level, ngl in levels_of(spec, block_count(a.model))]
    if a.dry_run:
        runners = [runner(threads, tag) for _, _, _, threads, tag in plan]
        print(json.dumps({"recipe": recipe.name, "text_sha256": text_sha, "ctx_size": recipe.smoke.ctx_size,
                          "tokens_needed": nm.tokens_needed(rounds=spec.rounds, jump=spec.jump, steps=spec.steps),
                          "runs": [{"device": d, "level": lv, "layers": ngl, "threads": r.threads, "tag": r.log_tag,
                                    "ubatch": r.spec.ubatch, "env": [list(e) for e in r.env]}
                                   for (d, lv, ngl, _, _), r in zip(plan, runners)]}, indent=2))
        return 0
    for device, level, ngl, threads, tag in plan:
        t0 = time.monotonic()
        run, tokens = runner(threads, tag).run(device, level, ngl, text, tokens)
        seconds = time.monotonic() - t0
        if base is None:
            base = run
        fig = nm.compare(base.scored, run.scored)
        row = {"device": device, "level": level, "layers": ngl, "threads": threads, "tag": tag,
               "seconds": round(seconds, 2), "batches": run.batches_note or "as planned", **fig.to_dict()}
        rows.append(row)
        print(f"{device:8} {level:5} -ngl {ngl:>3} t{threads} {tag:10} {seconds:6.1f} s  ppl {fig.ppl:.4f} "
              f"ratio {fig.ppl_ratio:.6f}  KLD mean {fig.kld_mean:.3g} p99 {fig.kld_p99:.3g} max {fig.kld_max:.3g}  "
              f"top-1 {fig.top1:.1%}", flush=True)
    workload = {"ubatch": spec.ubatch, "rounds": spec.rounds, "jump": spec.jump, "steps": spec.steps,
                "top_k": spec.top_k}
    (a.out / "budgets.json").write_text(json.dumps({"recipe": recipe.name, "runs": rows, "workload": workload},
                                                   indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
