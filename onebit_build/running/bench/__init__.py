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
- :mod:`.render` and :mod:`.chart`: the table, ``bench.json`` and ``bench.png``

Names are loaded when first used (PEP 562): the command line imports the package for its
defaults, and that must not import the run loop, requests and the plot.
"""

from __future__ import annotations

import importlib

# name -> the submodule that defines it
_WHERE = {
    "Expectation": "judge", "Step": "judge", "BenchVerdict": "judge", "judge_answer": "judge",
    "steps_from_probs": "judge",
    "Build": "plan", "Config": "plan", "Prompt": "plan", "Variant": "plan", "completion_body": "plan",
    "load_expectations": "plan", "load_prompts": "plan", "make_variants": "plan", "parse_build": "plan",
    "parse_builds": "plan", "parse_config": "plan", "parse_configs": "plan", "pick_devices": "plan",
    "resolve_devices": "plan", "server_in": "plan",
    "PLOT_EXTRA_HINT": "chart", "plot": "chart",
    "BenchOutputs": "render", "bench_doc": "render", "render_markdown": "render", "render_table": "render",
    "table_lines": "render", "write_outputs": "render",
    "BenchLock": "run", "BenchRequest": "run", "BenchResult": "run", "ServerRun": "run", "run_bench": "run",
    "BenchDefaults": "settings", "DEFAULTS": "settings",
    "Cell": "summary", "summarize": "summary",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
