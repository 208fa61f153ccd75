"""The bench plot: one panel per prompt and speed, a bar per variant, invalid ones marked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onebit_build.running.bench.run import BenchResult
    from onebit_build.running.bench.summary import Cell

BASE_COLOR = "#4c72b0"
OTHER_COLOR = "#dd8452"
INVALID_COLOR = "#c0392b"
# (Cell attribute of the speed, axis label, Cell attribute of its change vs the baseline)
METRICS = (("decode", "decode tok/s", "decode_vs_base_pct"), ("prompt_speed", "prompt tok/s", "prompt_vs_base_pct"))


def fmt_speed(x: float) -> str:
    """A speed figure as the table and the plot print it."""
    return f"{x:.0f}" if x >= 1000 else f"{x:.1f}"


# matplotlib is an optional extra (about half of the tool's installed size, for one picture).
PLOT_EXTRA_HINT = "pip install 'onebit-build[plot]' for bench.png"


def plot_available() -> bool:
    try:
        import matplotlib  # noqa: F401  - only asked whether it is there
    except ImportError:
        return False
    return True


def plot(result: BenchResult, path: Path) -> Path | None:
    """A PNG: one panel per prompt for decode tok/s (top row) and prompt tok/s (bottom
    row); a bar per variant at its median with a min-max whisker; the baseline in its own
    colour; an invalid variant has no bar, only a red INVALID mark. None when matplotlib
    (the ``plot`` extra) is not installed."""
    if not plot_available():
        return None
    # Imported here: matplotlib is optional, and slow to import for every other command.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # (the same reason)

    req = result.request
    prompts = [p.name for p in req.prompts]
    names = [v.name for v in req.variants]
    ncols = len(prompts)
    width = max(8.5, min(16.0, 1.0 + ncols * max(2.4, 0.75 * len(names) + 0.8)))
    fig = Figure(figsize=(width, 6.8), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, ncols, squeeze=False)
    for row, (attr, label, pct_attr) in enumerate(METRICS):
        for col, p in enumerate(prompts):
            ax = axes[row][col]
            _panel(ax, [result.cell(n, p) for n in names], names, attr=attr, pct_attr=pct_attr)
            ax.set_title(f"{p}: {label}", fontsize=10)
            if col == 0:
                ax.set_ylabel(label)
    tie_note = "; * valid after a near tie" if any(c.note for c in result.cells) else ""
    fig.suptitle(
        f"llama-server bench: {req.model.path.name}, {req.decode_tokens} generated tokens, {req.rounds} rounds\n"
        f"bars: median, whiskers: min-max; labels: median and change vs the baseline {names[0]!r} (blue)\n"
        f"red INVALID: the answer diverged, no figure{tie_note}",
        fontsize=10,
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def _panel(ax: Any, cells: list[Cell], names: list[str], *, attr: str, pct_attr: str) -> None:
    """One prompt's bars of one speed: a bar per variant, the first is the baseline."""
    tops = [getattr(c, attr).high for c in cells if c.valid and getattr(c, attr)]
    ymax = max(tops) * 1.28 if tops else 1.0
    for i, c in enumerate(cells):
        s = getattr(c, attr)
        if not c.valid or s is None:
            # A full-height band, so that it cannot be read as a speed.
            ax.axvspan(i - 0.31, i + 0.31, facecolor="#fbe9e7", edgecolor=INVALID_COLOR, hatch="//", linewidth=0.0)
            ax.text(i, ymax * 0.5, "INVALID", rotation=90, ha="center", va="center", color=INVALID_COLOR,
                    fontsize=10, fontweight="bold", backgroundcolor="white")
            continue
        color = BASE_COLOR if i == 0 else OTHER_COLOR
        ax.bar(i, s.median, width=0.62, color=color, edgecolor="black", linewidth=0.5)
        ax.errorbar(i, s.median, yerr=[[s.median - s.low], [s.high - s.median]], fmt="none", ecolor="black",
                    elinewidth=1.0, capsize=4)
        pct = getattr(c, pct_attr)
        note = fmt_speed(s.median) + ("*" if c.note else "") + ("" if i == 0 or pct is None else f"\n{pct:+.0f}%")
        ax.text(i, s.high + ymax * 0.02, note, ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, ymax)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_xticks(range(len(names)))
    long_names = max(len(n) for n in names) > 6
    ax.set_xticklabels(names, rotation=20 if long_names else 0, ha="right" if long_names else "center", fontsize=8)
    for tick, c in zip(ax.get_xticklabels(), cells):
        if not c.valid:
            tick.set_color(INVALID_COLOR)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
