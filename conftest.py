"""pytest configuration for the whole tree: GPU tests (marker ``gpu``) skip, saying why, where no Hopper GPU is present."""
from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def hopper_gpu_absent_reason() -> str | None:
    """None when an sm_90 GPU is usable through the CUDA driver, else why not."""
    try:
        from cuda.bindings import driver as cu
    except ImportError as exc:  # pragma: no cover - cuda-python is a dependency
        return f"cuda-python is not importable ({exc})"
    err, = cu.cuInit(0)
    if err != cu.CUresult.CUDA_SUCCESS:
        return f"the CUDA driver did not initialise (cuInit returned {err.name})"
    err, count = cu.cuDeviceGetCount()
    if err != cu.CUresult.CUDA_SUCCESS or count == 0:
        return "no CUDA device is present"
    err, major = cu.cuDeviceGetAttribute(
        cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0)
    if major != 9:
        return f"device 0 has compute capability {major}.x; layoutkit's GPU tests need 9.0 (Hopper)"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    reason = hopper_gpu_absent_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test skipped: {reason}")
    for item in gpu_items:
        item.add_marker(skip)


# `python -m layoutkit` runs the CLI; doctest collection must not import it.
collect_ignore = ["layoutkit/__main__.py"]
