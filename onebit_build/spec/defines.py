"""``-D [COMPONENT:]NAME=VALUE``: a recipe's CMake define overridden on the command line, read
once into a :class:`Define` (the recipe's components and the values' references are checked
where the recipe is loaded)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from onebit_build.core.errors import ConfigError
from onebit_build.core.names import CMAKE_NAME, is_cmake_name

DEFINE_RE = re.compile(rf"^(?:(?P<comp>[A-Za-z0-9_.-]+):)?(?P<name>{CMAKE_NAME.pattern})"
                       r"(?::[A-Z]+)?=(?P<value>.*)$", re.S)


@dataclass(frozen=True, kw_only=True)
class Define:
    """A ``-D [COMPONENT:]NAME=VALUE`` override of a recipe's CMake define."""

    component: str | None
    name: str
    value: str

    def render(self) -> str:
        return f"{self.component + ':' if self.component else ''}{self.name}={self.value}"


class DefineSyntaxError(ConfigError):
    """A ``-D`` that is not ``[COMPONENT:]NAME=VALUE``. Its hint is made from the recipe when
    the recipe can be read (``define_examples``), since only the recipe knows its components."""

    def __init__(self, text: str):
        super().__init__(f"-D {text!r}: expected NAME=VALUE or COMPONENT:NAME=VALUE",
                         hint="'onebit-build plan' lists each component's defines")
        self.text = text


def define_examples(recipe) -> tuple[str, ...]:
    """Overrides that are valid for ``recipe``, for an error's hint: a define of the component
    that builds llama-server, and one of each other component, named with it. Pure."""
    main = recipe.server_component
    found = []
    for comp in (main, *(c for c in recipe.components if c is not main)):
        if comp.defines:
            name, value = comp.defines[0]
            setting = f"{name}={value}" if comp is main else f"{comp.name}:{name}={value}"
            found.append(f"-D {shlex.quote(setting)}")
    return tuple(found)


def parse_define(text: str) -> Define:
    """``NAME=VALUE`` or ``COMPONENT:NAME=VALUE`` (a CMake type suffix ``NAME:BOOL=`` is accepted
    and dropped: the recipe's cache file sets strings). Pure."""
    m = DEFINE_RE.match(text)
    if not m:
        raise DefineSyntaxError(text)
    comp = m.group("comp")
    if comp is not None and comp.isupper():  # NAME:TYPE=VALUE was read as COMPONENT:NAME
        comp = None
        name = text.split(":", 1)[0]
    else:
        name = m.group("name")
    if not is_cmake_name(name):
        raise ConfigError(f"-D {name}=...: {name!r} is not a CMake variable name",
                          hint="use letters, digits and '_' only, not starting with a digit")
    return Define(component=comp, name=name, value=m.group("value"))
