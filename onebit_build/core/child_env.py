"""The environment of every program the tool starts: the tool's own, less its secrets.

The tool takes secrets from variables of its own (a token, a password, an API key, a cache
URL that may carry a password). It hands each one to the program that needs it in that
program's own terms (a file, a header, llama-server's own variable), so no program it starts
needs these names: a server that outlives the run (sccache's) would keep them otherwise."""

from __future__ import annotations

import os
from typing import Mapping, Sequence

# Every variable that may hold a secret of the tool's: the one list (a test ties each module's
# name for its variable to it).
SECRET_VARIABLES = (
    "ONEBIT_COMPILER_CACHE_DIST_TOKEN",  # the sccache-dist token (building/cache/dist.py)
    "ONEBIT_OCI_PASSWORD",  # the registry's password (distribution/oci_ref.py)
    "ONEBIT_API_KEY",  # serve's API key (running/server_args.py)
    "ONEBIT_COMPILER_CACHE_URL",  # may carry a Redis password (building/cache/request.py)
    "LLAMA_API_KEY",  # llama-server's keys: given to llama-server only
)


def child_environ(env: Mapping[str, str] | None = None, *, given: Sequence[str] = ()) -> dict[str, str]:
    """This process's environment with ``env``'s entries on top, less every secret variable
    but those the program is ``given`` by name. Pure but for reading the environment."""
    full = dict(os.environ)
    full.update(env or {})
    for name in SECRET_VARIABLES:
        if name not in given:
            full.pop(name, None)
    return full
