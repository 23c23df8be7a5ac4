"""What the doctor reports of the machine and build: devices, kernel mode, patch."""

from __future__ import annotations

from ..backend import (
    FAST_KERNELS,
    SWA_RING,
    LlamaModel,
    cpu_has_amx,
    device_info,
    ll,
    worker_devices,
)
from .report import Environment

EXACT_KERNELS = "batch-invariant (exact: a verify row rounds as a plain step does)"
FAST = "llama.cpp's default kernels (EDGESPEC_FAST_KERNELS=1: fast, not bit-exact)"


def environment(model: LlamaModel, gpu_layers: int) -> Environment:
    """The backend the target runs on and how llama.cpp was built and set up here."""
    devices = [device_info(d) for d in worker_devices()]  # the accelerators, else the CPU
    names = [d.name for d in devices]
    return Environment(
        backend="CPU" if names == ["CPU"] else ", ".join(names),
        devices=[
            {"name": d.name, "description": d.description, "memory_mib": d.total / 2**20}
            for d in devices
        ],
        gpu_offload=bool(ll.llama_supports_gpu_offload()),
        gpu_layers=gpu_layers,
        threads=model.n_threads,
        kernel_mode=FAST if FAST_KERNELS else EXACT_KERNELS,
        swa_ring=SWA_RING,
        amx=cpu_has_amx(),
        system_info=ll.llama_print_system_info().decode("utf-8", "replace").strip(),
    )
