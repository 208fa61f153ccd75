"""The doctor's line for the binary cache: whether the registry ``--binary-cache`` (or
``$ONEBIT_BINARY_CACHE``) names answers, and where its credentials would come from (never
what they are)."""

from __future__ import annotations

from typing import Mapping

from onebit_build.distribution.oci import Registry
from onebit_build.distribution.oci_ref import credentials_for, parse_ref
from onebit_build.core.errors import OnebitError
from onebit_build.doctor.requirements import Check

NAME = "binary cache"


def binary_cache_checks(given: tuple[str | None, str], environ: Mapping[str, str]) -> list[Check]:
    """``given``: the registry the command line names (or None) and the flag or variable that named it."""
    text, flag = given
    if not text:
        return [Check(name=NAME, ok=None, detail="none (builds compile here; --binary-cache oci://REGISTRY/REPO or "
                                                 "$ONEBIT_BINARY_CACHE names a registry holding published builds)")]
    try:
        ref = parse_ref(text, flag)
        creds = credentials_for(ref.registry, environ)
        with Registry(ref, environ=environ) as reg:
            version = reg.ping()
    except OnebitError as exc:
        return [Check(name=NAME, ok=False, detail=f"{text}: {exc.message}",
                      fix=f"{exc.hint or 'check the reference'}; until then builds fall back to compiling here")]
    who = f"credentials from {creds.origin}" if creds else "no credentials (anonymous)"
    return [Check(name=NAME, ok=True, detail=f"{ref} answers ({version}); {who}")]
