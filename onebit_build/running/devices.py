"""Which devices a run uses: the devices a binary lists (``--list-devices``), which expected
ones it lacks, and the recipe's smoke devices plus each optional device that every build in
the run lists (the one rule smoke and verify-run share). Pure."""

from __future__ import annotations

from typing import Mapping, Sequence

from onebit_build.spec.recipe import SmokeSpec

CPU_DEVICE = "CPU"  # llama.cpp's name for the CPU backend, always there


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


def parse_list_devices(text: str) -> tuple[str, ...]:
    """Device names from ``llama-server --list-devices`` output (lines ``  NAME: description``
    after ``Available devices:``; ``(none)`` means no device besides the CPU)."""
    names: list[str] = []
    in_list = False
    for line in text.splitlines():
        if line.strip() == "Available devices:":
            in_list = True
            continue
        if not in_list:
            continue
        if not line.startswith((" ", "\t")):
            in_list = False
            continue
        item = line.strip()
        if item == "(none)" or ":" not in item:
            continue
        names.append(item.split(":", 1)[0].strip())
    return tuple(names)


def missing_devices(expected: tuple[str, ...], available: tuple[str, ...]) -> tuple[str, ...]:
    """Expected devices the binary does not offer. The CPU is always there."""
    return tuple(d for d in expected if d != CPU_DEVICE and d not in available)
