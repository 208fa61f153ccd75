"""``--version``: the tool's version, the pins it would build and where its recipes come from."""

from __future__ import annotations

from onebit_build import __version__
from onebit_build.core import ui
from onebit_build.core.errors import ConfigError
from onebit_build.core.project import ProjectRoot, pins_digest


def version(project: ProjectRoot | None, error: ConfigError | None = None) -> int:
    """The tool's version, the pins it would build and where its recipes come from."""
    lines = [f"onebit-build {__version__}"]
    if project is None:
        lines.append(f"recipes: none found ({error})")
    else:
        digest = pins_digest(project)
        lines.append(f"pins.yaml sha256 {digest}" if digest else f"pins.yaml: not readable in {project.path}")
        lines.append(f"recipes from {project.describe()}")
    ui.answer_lines(lines)
    return 0
