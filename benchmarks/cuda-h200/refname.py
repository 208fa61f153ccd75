"""refname.py: the file name a reference written by ``verify --write-reference`` is committed under
in ``references/<recipe>/`` (the tool's own ``reference_name`` of the fingerprint it records), so
that a plain ``verify`` finds it by the toolchain.

usage: python3 refname.py REFERENCE.json RECIPE   (prints NAME.json; exit 1 if the file is not a
reference of that recipe)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from onebit_build.checking.references import REF_KIND, reference_name


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: refname.py REFERENCE.json RECIPE", file=sys.stderr)
        return 2
    path, recipe = Path(argv[0]), argv[1]
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"refname: {path}: {exc}", file=sys.stderr)
        return 1
    fp = doc.get("fingerprint") if isinstance(doc, dict) else None
    if doc.get("kind") != REF_KIND or doc.get("recipe") != recipe or not isinstance(fp, dict):
        print(f"refname: {path} is not a reference of recipe {recipe}", file=sys.stderr)
        return 1
    print(reference_name({str(k): str(v) for k, v in fp.items()}) + ".json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
