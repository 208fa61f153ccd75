"""Which devices a run uses: the recipe's smoke devices, and each optional device that every
build in the run lists (the one rule smoke and verify-run share). Pure."""

from __future__ import annotations

from typing import Mapping, Sequence

from onebit_build.core.config import SmokeSpec


def pick_devices(spec: SmokeSpec, listed: Mapping[str, Sequence[str]]) -> tuple[tuple[str, ...], dict[str, str]]:
    """The devices to run on, and why each optional device left out is left out. ``listed``:
    the devices each build (by its role) lists in ``--list-devices``."""
    devices = list(spec.devices)
    left_out: dict[str, str] = {}
    for dev in spec.optional_devices:
        lacking = [role for role, names in listed.items() if dev not in names]
        if not lacking:
            devices.append(dev)
        elif len(lacking) < len(listed):
            having = [role for role in listed if role not in lacking]
            left_out[dev] = f"listed by the {' and '.join(having)} build only"
        else:
            shown = "; ".join(f"{role + ': ' if len(listed) > 1 else ''}{', '.join(names) or 'none'}"
                              for role, names in listed.items())
            left_out[dev] = f"not listed by --list-devices (lists: {shown}). {spec.skip_reason}".strip()
    return tuple(devices), left_out
