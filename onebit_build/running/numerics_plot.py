"""The numerical check's picture: KL divergence per scored position, one line per device and
offload level, the budgets' 99th-percentile line across; the jumps (long batches) marked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onebit_build.running.numerics_run import NumericsResult

HINT = "pip install 'onebit-build[plot]' for numerics.png"


def plot(result: NumericsResult, path: Path) -> Path | None:
    """A PNG at ``path``; None when matplotlib (the ``plot`` extra) is not installed or there is
    nothing compared to draw."""
    if not result.figures:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    floor = 1e-7  # a position with no divergence at all is drawn at the bottom of the log axis
    runs = {(r.device, r.level): r for r in result.runs}
    for device, level, figures in result.figures:
        run = runs.get((device, level))
        xs = [s.pos for s in run.scored] if run else list(range(len(figures.kld)))
        label = device if level == "cpu" else f"{device} {level} (-ngl {run.layers if run else '?'})"
        ax.plot(xs, [max(v, floor) for v in figures.kld], marker=".", linewidth=0.8, markersize=3,
                label=f"{label}: mean {figures.kld_mean:.2g}")
    cpu = runs.get(("CPU", "cpu"))
    if cpu is not None:
        for s in cpu.scored:
            if s.batch > 1:
                ax.axvline(s.pos, color="#999999", linewidth=0.5, linestyle=":")
    ax.set_yscale("log")
    ax.set_xlabel("position in the evaluation text (dotted: after a long batch)")
    ax.set_ylabel("KL divergence from the base (nats)")
    ax.set_title("numerical check: next-token distributions against the base run")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
