"""The offload check: each device's smoke run fails unless the server's load log shows the
model's layers on that device. Read against the real CPU server's real log, and against
lines written with llama.cpp's own format strings (src/llama-model.cpp, load_tensors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiny_chat_model import LAYERS, write_tiny_model

from onebit_build.running import server as srvmod
from onebit_build.running.server_args import ServerSpec
from onebit_build.running.offload import check_offload, parse_load_log

FUNC = "load_tensors"


def offloaded(n: int, m: int) -> str:
    return "%s: offloaded %d/%d layers to GPU\n" % (FUNC, n, m)


def buffer(name: str, mib: float) -> str:
    return "%s: %12s model buffer size = %8.2f MiB\n" % (FUNC, name, mib)


def gpu_load(device: str, n: int = 29, m: int = 29) -> str:
    """The lines a server that put the model on ``device`` logs, in upstream's format."""
    return (
        "%s: offloading output layer to GPU\n" % FUNC
        + "%s: offloading %d repeating layers to GPU\n" % (FUNC, n - 1)
        + offloaded(n, m)
        + buffer(device, 310.5)
        + buffer("CPU_Mapped", 80.0)
    )


@pytest.fixture(scope="module")
def cpu_log(llama_server, tmp_path_factory) -> str:
    """The real load log of the real CPU llama-server serving a real (tiny) model."""
    folder = tmp_path_factory.mktemp("offload")
    model = write_tiny_model(folder / "tiny.gguf", chat_template=None)
    spec = ServerSpec(binary=Path(llama_server), model=model, log=folder / "server.log", ctx_size=256, threads=2)
    server = srvmod.start(spec)
    try:
        return spec.log.read_text()
    finally:
        server.stop()


def test_the_real_cpu_log_passes_for_the_cpu(cpu_log):
    load = parse_load_log(cpu_log)
    assert load.buffers and not load.device_buffers, cpu_log[-2000:]
    check = check_offload("CPU", cpu_log)
    assert check.passed, check.summary


def test_the_real_cpu_log_fails_a_gpu_device(cpu_log):
    """A server without the GPU backend (or one that fell back to the CPU) fails the device."""
    check = check_offload("Vulkan0", cpu_log)
    assert not check.passed and "no 'offloaded N/M layers to GPU' line" in check.summary


def test_all_layers_on_the_device_pass(cpu_log):
    check = check_offload("HRX20", cpu_log + gpu_load("HRX20"))
    assert check.passed and "29/29 layers to HRX20" in check.summary
    assert check.evidence["buffers_mib"]["HRX20"] == 310.5


@pytest.mark.parametrize(
    "log, why",
    [
        (offloaded(20, 29) + buffer("Vulkan0", 200.0) + buffer("CPU_Mapped", 80.0), "only 20/29 layers"),
        (offloaded(0, 29) + buffer("CPU_Mapped", 80.0), "only 0/29 layers"),
        (offloaded(29, 29) + buffer("CPU_Mapped", 390.0), "every weight buffer is host memory"),
    (offloaded(29, 29) + buffer("Vulkan_Host", 390.0), "every weight buffer is host memory"),
    ],
)
def test_partial_or_host_only_loads_fail(log, why):
    check = check_offload("Vulkan0", log)
    assert not check.passed and why in check.summary


def test_a_cpu_check_fails_when_layers_went_to_a_gpu():
    assert not check_offload("CPU", gpu_load("Vulkan0")).passed
    # -ngl 0 on a GPU build: the line says 0 layers went anywhere, which is right for the CPU
    assert check_offload("CPU", offloaded(0, LAYERS + 1) + buffer("CPU_Mapped", 1.0)).passed
