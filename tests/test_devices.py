"""The one rule for which devices a run uses (smoke and verify-run share it)."""

from __future__ import annotations

from onebit_build.spec.recipe import SmokeSpec
from onebit_build.running.devices import pick_devices

SPEC = SmokeSpec(devices=("CPU",), optional_devices=("Vulkan0",), skip_reason="no Vulkan GPU here")


def test_an_optional_device_joins_when_every_build_lists_it():
    assert pick_devices(SPEC, {"new": ("Vulkan0",)}) == (("CPU", "Vulkan0"), {})
    assert pick_devices(SPEC, {"new": ("Vulkan0",), "working": ("Vulkan0", "CUDA0")}) == (("CPU", "Vulkan0"), {})


def test_an_optional_device_left_out_says_why():
    devices, why = pick_devices(SPEC, {"new": ()})
    assert devices == ("CPU",) and why == {"Vulkan0": "not listed by --list-devices (lists: none). no Vulkan GPU here"}
    devices, why = pick_devices(SPEC, {"new": ("Vulkan0",), "working": ()})
    assert devices == ("CPU",) and why == {"Vulkan0": "listed by the new build only"}
