"""A recipe's ``numerics``: how smoke checks the numbers behind the answers (running/numerics.py
says what is measured), and the budgets a run must stay within. Validated at load; every
figure lives here, in the recipe, so that a box with other needs changes its recipe, not code.

```yaml
numerics:
  text: harbour.txt      # a file of smoke/eval/
  ubatch: 32             # the servers' -ub: every jump is longer
  rounds: 4              # a jump of `jump` tokens, then `steps` single tokens, per round
  jump: 80
  steps: 40
  top_k: 20
  offload: [all, half, none]   # -ngl levels of every device but the CPU
  budgets:
    reference: {kld_mean: ..., kld_p99: ..., ppl_ratio: ..., top1: ...}   # CPU vs the committed reference
    device: {kld_mean: ..., kld_p99: ..., ppl_ratio: ..., top1: ...}      # a device vs this box's CPU
```
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onebit_build.core.names import is_file_name
from onebit_build.spec.yamlnode import Node, Range

OFFLOAD_LEVELS = ("all", "half", "none")
BUDGET_KEYS = ("kld_mean", "kld_p99", "ppl_ratio", "top1")
_DIVERGENCE = Range(0.0, 100.0, "(nats)")
_SHARE = Range(0.0, 1.0, "(a share)")
_RATIO = Range(0.0, 10.0, "(a fraction)")


@dataclass(frozen=True, kw_only=True)
class BudgetSpec:
    kld_mean: float
    kld_p99: float
    ppl_ratio: float
    top1: float


@dataclass(frozen=True, kw_only=True)
class NumericsSpec:
    text: str = "harbour.txt"
    ubatch: int = 32
    rounds: int = 4
    jump: int = 80
    steps: int = 40
    top_k: int = 20
    offload: tuple[str, ...] = OFFLOAD_LEVELS
    reference: BudgetSpec = field(default_factory=lambda: BudgetSpec(kld_mean=1e-4, kld_p99=1e-3,
                                                                     ppl_ratio=0.002, top1=0.99))
    device: BudgetSpec = field(default_factory=lambda: BudgetSpec(kld_mean=0.02, kld_p99=0.15,
                                                                  ppl_ratio=0.04, top1=0.88))

    @property
    def positions(self) -> int:
        return self.rounds * (self.steps + 1)


def _budget(node: Node, key: str) -> BudgetSpec:
    sub = node.child(key)
    assert sub is not None
    sub.only(set(BUDGET_KEYS))
    ranges = {"kld_mean": _DIVERGENCE, "kld_p99": _DIVERGENCE, "ppl_ratio": _RATIO, "top1": _SHARE}
    return BudgetSpec(**{k: float(sub.number(k, ranges[k], required=True)) for k in BUDGET_KEYS})


def load_numerics(root: Node) -> NumericsSpec | None:
    node = root.child("numerics", required=False)
    if node is None:
        return None
    node.only({"text", "ubatch", "rounds", "jump", "steps", "top_k", "offload", "budgets"})
    d = NumericsSpec()
    text = node.get("text", str, required=False, default=d.text)
    if not is_file_name(text):
        node.fail(f"text {text!r} is not a file name", "name a file of smoke/eval/, e.g. harbour.txt", key="text")
    whole = {k: int(node.number(k, Range(1, 4096, "of tokens" if k != "rounds" else "of rounds", whole=True),
                                default=getattr(d, k)))
             for k in ("ubatch", "rounds", "jump", "steps")}
    top_k = int(node.number("top_k", Range(1, 100, "of tokens", whole=True), default=d.top_k))
    offload = node.str_list("offload", required=False) or d.offload
    for level in offload:
        if level not in OFFLOAD_LEVELS:
            node.fail(f"offload level {level!r} is unknown", f"use {', '.join(OFFLOAD_LEVELS)}", key="offload")
    if whole["jump"] <= whole["ubatch"]:
        node.fail(f"jump {whole['jump']} is not longer than ubatch {whole['ubatch']}",
                  "a jump must span several micro-batches: make it longer than ubatch", key="jump")
    spec = NumericsSpec(text=text, top_k=top_k, offload=tuple(dict.fromkeys(offload)), **whole)
    if spec.positions < 4 * spec.ubatch:
        node.fail(f"{spec.positions} scored positions (rounds x (steps + 1)) are fewer than 4 x ubatch "
                  f"({4 * spec.ubatch})", "score more positions (rounds or steps) or lower ubatch", key="steps")
    budgets = node.child("budgets", required=False)
    if budgets is not None:
        budgets.only({"reference", "device"})
        if budgets.has("reference"):
            spec = _replace(spec, reference=_budget(budgets, "reference"))
        if budgets.has("device"):
            spec = _replace(spec, device=_budget(budgets, "device"))
    return spec


def _replace(spec: NumericsSpec, **kw: BudgetSpec) -> NumericsSpec:
    from dataclasses import replace

    return replace(spec, **kw)
