"""The bench stage: interleaved, locked, answer-gated decode benchmarks of llama-server.

Variants (a build served on a device with a config's arguments; the first is the baseline)
run interleaved (round 1: A B C, round 2: A B C, ...), each round with a fresh server, one
warm-up request, then one greedy request per prompt with the prompt cache off and a fixed
number of generated tokens. A figure counts only when its answer held; a variant whose text
diverges is invalid for that prompt in every table and plot, never reported as fast.

- :mod:`.settings`: the defaults and fixed names
- :mod:`.plan`: prompts, configs, builds, expectations given up front, variants, the order
- :mod:`.judge`: whether one answer holds (prefix, near ties)
- :mod:`.summary`: the samples' statistics per variant and prompt (samples and statistics
  are :mod:`onebit_build.running.measure`'s, shared with the smoke stage)
- :mod:`.run`: the run loop and the bench lock
- :mod:`.render` and :mod:`.plot`: the table, ``bench.json`` and ``bench.png``
"""

from onebit_build.running.bench.judge import Expectation, Step, Verdict, judge_answer, steps_from_probs
from onebit_build.running.bench.plan import (
    Build,
    Config,
    Prompt,
    Variant,
    completion_body,
    load_expectations,
    load_prompts,
    make_variants,
    parse_build,
    parse_builds,
    parse_config,
    parse_configs,
    pick_devices,
    resolve_devices,
    schedule,
    server_in,
)
from onebit_build.running.bench.plot import PLOT_EXTRA_HINT, plot
from onebit_build.running.bench.render import BenchOutputs, bench_doc, render_markdown, render_table, write_outputs
from onebit_build.running.bench.run import BenchLock, BenchRequest, BenchResult, ServerRun, run_bench
from onebit_build.running.bench.settings import DEFAULTS, BenchDefaults
from onebit_build.running.bench.summary import Cell, summarize

__all__ = [
    "DEFAULTS", "BenchDefaults", "BenchLock", "BenchOutputs", "BenchRequest", "BenchResult", "Build", "Cell", "Config",
    "Expectation", "Prompt", "ServerRun", "Step", "Variant", "Verdict", "bench_doc",
    "completion_body", "judge_answer", "load_expectations", "load_prompts", "make_variants", "parse_build", "parse_builds",
    "PLOT_EXTRA_HINT", "parse_config", "parse_configs", "pick_devices", "plot", "render_markdown", "render_table", "resolve_devices",
    "run_bench", "schedule", "server_in", "steps_from_probs", "summarize", "write_outputs",
]
