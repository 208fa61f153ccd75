"""Did the device do the work? What llama-server's load log says about where the model's
layers went, and the per-device verdict drawn from it.

llama.cpp's ``llama_model_base::load_tensors`` (``src/llama-model.cpp``) logs, when a GPU
backend is present, ``offloaded N/M layers to GPU`` (M is the model's layers plus the
output layer), then one ``<buffer> model buffer size = X MiB`` line per weight buffer. A
CPU-only build prints no offload line at all. A server asked for a GPU device that loads
its weights into CPU buffers has fallen back to the CPU, and its speed and answers say
nothing about the device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from onebit_build.running.devices import CPU_DEVICE
from onebit_build.running.smoke_checks import SmokeCheck

_OFFLOADED = re.compile(r"offloaded (?P<n>-?\d+)/(?P<m>\d+) layers to GPU")
_BUFFER = re.compile(r"load_tensors:\s+(?P<name>\S+) model buffer size =\s*(?P<mib>[0-9.]+) MiB")


@dataclass(frozen=True, kw_only=True)
class LoadLog:
    """What one model load logged: the offload line's figures (None without one) and the
    weight buffers by name, in MiB."""

    offloaded: int | None
    layers: int | None
    buffers: tuple[tuple[str, float], ...]

    @property
    def device_buffers(self) -> tuple[str, ...]:
        """Names of the weight buffers that are not host (CPU) memory."""
        return tuple(name for name, _ in self.buffers if not is_host_buffer(name))


def is_host_buffer(name: str) -> bool:
    """llama.cpp's host buffers: CPU, CPU_Mapped, CPU_REPACK and so on, and a GPU backend's
    pinned host memory, named ``<backend>_Host`` (``Vulkan_Host``, ``CUDA_Host``)."""
    return name == CPU_DEVICE or name.startswith(CPU_DEVICE + "_") or name.endswith("_Host")


def parse_load_log(text: str) -> LoadLog:
    """The first model load in a server log (a later one would be a draft model)."""
    m = _OFFLOADED.search(text)
    buffers = tuple((b.group("name"), float(b.group("mib"))) for b in _BUFFER.finditer(text))
    return LoadLog(
        offloaded=int(m.group("n")) if m else None,
        layers=int(m.group("m")) if m else None,
        buffers=buffers,
    )


def offload_problem(device: str, load: LoadLog) -> str:
    """Why the load log shows the model was not where ``device`` says; "" when it was."""
    if device == CPU_DEVICE:
        if load.offloaded:
            return f"{load.offloaded}/{load.layers} layers went to a GPU, but the check is of the CPU"
        if load.device_buffers:
            return f"weights in device buffers {', '.join(load.device_buffers)}, but the check is of the CPU"
        return ""
    if load.offloaded is None:
        return (
            "the load log has no 'offloaded N/M layers to GPU' line: this server has no GPU backend, "
            "the model ran on the CPU"
        )
    if load.layers is None or load.offloaded != load.layers or load.offloaded <= 0:
        return f"only {load.offloaded}/{load.layers} layers were offloaded to {device}; the rest ran on the CPU"
    if not load.device_buffers:
        names = ", ".join(n for n, _ in load.buffers) or "none logged"
        return f"every weight buffer is host memory ({names}): nothing was put on {device}"
    return ""


def check_offload(device: str, log_text: str) -> SmokeCheck:
    """The smoke check 'offload': the model's layers are on ``device`` (on the CPU: on no GPU)."""
    load = parse_load_log(log_text)
    evidence = {
        "offloaded": load.offloaded,
        "layers": load.layers,
        "buffers_mib": {name: mib for name, mib in load.buffers},
        "device_buffers": list(load.device_buffers),
    }
    problem = offload_problem(device, load)
    if problem:
        return SmokeCheck(name="offload", device=device, passed=False, summary=f"offload: {problem}", evidence=evidence)
    if device == CPU_DEVICE:
        summary = "offload: no layer went to a GPU; the weights are in host buffers"
    else:
        summary = (
            f"offload: {load.offloaded}/{load.layers} layers to {device} (weights in {', '.join(load.device_buffers)})"
        )
    return SmokeCheck(name="offload", device=device, passed=True, summary=summary, evidence=evidence)
