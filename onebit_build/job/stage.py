"""The stages of a job, in order (its own module: the command table names them and must
stay cheap to import)."""

from __future__ import annotations

import enum


class Stage(enum.IntEnum):
    """The stages of a job, in order; a command runs up to (and including) one of them."""

    FETCH = 1
    PATCH = 2
    BUILD = 3
    VERIFY = 4  # compare the kernel artifacts with the matching reference
    SMOKE = 5  # start the server and check it; write the report
