"""The in-toto link of a build, for ``in-toto-verify`` with a layout of the consumer's own.

A link names one step (``build``), its materials and products by path with their digests:
the sources as ``sources/<name>`` (their git commit), the patches as
``patches/<source>/<file>``, the recipe as ``recipes/<file>`` and the outputs by file name,
as the statement's subjects. It is signed in a DSSE envelope by the build's key and written
as ``build.<first 8 hex of the key id>.link``, the name ``in-toto-verify`` looks for. An
unsigned build writes no link: in-toto accepts none.
"""

from __future__ import annotations

from typing import Any

STEP = "build"


def link_name(keyid: str) -> str:
    """The file name in-toto-verify looks for (in-toto's FILENAME_FORMAT). Pure."""
    return f"{STEP}.{keyid[:8]}.link"


def build_link(statement: dict[str, Any]) -> dict[str, Any]:
    """The link of the build a provenance statement describes. Pure."""
    build = statement["predicate"]["buildDefinition"]
    materials: dict[str, dict[str, str]] = {}
    for dep in build["resolvedDependencies"]:
        role = dep.get("annotations", {}).get("role")
        if role == "source":
            materials[f"sources/{dep['name']}"] = dict(dep["digest"])
        elif role == "patch":
            materials[dep["name"]] = dict(dep["digest"])
    recipe = build["externalParameters"]["recipe"]
    if recipe.get("sha256"):
        materials[f"recipes/{recipe['file'].rsplit('/', 1)[-1]}"] = {"sha256": recipe["sha256"]}
    products = {s["name"]: dict(s["digest"]) for s in statement["subject"]}
    defines = [a for d in build["externalParameters"].get("defines", []) for a in ("-D", d)]
    return {"_type": "link", "name": STEP, "materials": materials, "products": products, "byproducts": {},
            "command": ["onebit-build", "--recipe", recipe["name"], *defines, "build"], "environment": {}}

