"""Launch shapes (grid, block, cluster, shared memory) and the driver's error reporting, on the CPU.

A fake Function with known attributes stands in for a loaded kernel; a fake cuda-python module stands
in for a machine without a driver. Nothing here needs a GPU.
"""
import subprocess
import sys
import textwrap

import pytest

from layoutkit.ptx import (CompiledKernel, CudaDriverError, Device, DriverUnavailableError, LoadedFunction,
                           LaunchConfigError, parse_entry)
from layoutkit.ptx import driver

H200_SMEM = {"MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448, "MAX_SHARED_MEMORY_PER_BLOCK": 49152}


def kernel_with_fake_function(ptx, *, static_smem=1024, max_threads=1024, num_regs=32):
    kernel = CompiledKernel(b"\x7fELF", signature=parse_entry(ptx))
    dev = Device(0, None, None, dict(H200_SMEM))
    fn = LoadedFunction(kernel.name, dev, None, static_smem, num_regs, max_threads)
    return kernel, fn


def validate(kernel, fn, grid=1, block=128, smem=0, cluster=None):
    return kernel._launch_plan(fn, grid, block, smem, cluster)


PLAIN = ".visible .entry plain(.param .u32 n) { ret; }"


@pytest.mark.parametrize("grid, block, message", [
    (0, 128, r"grid.x = 0 must be in 1..2147483647"),
    ((1, 65536), 128, r"grid.y = 65536 must be in 1..65535"),
    (1, (32, 1, 65), r"block.z = 65 must be in 1..64"),
    (1, (1025,), r"block.x = 1025 must be in 1..1024"),
    (1, (64, 32), r"block = \(64, 32, 1\) has 2048 threads; with 32 registers per thread it can run at most 1024"),
    (1.5, 128, r"grid = 1.5: give an int or a tuple of 1 to 3 ints"),
    ((1, 1, 1, 1), 128, r"grid = \(1, 1, 1, 1\): give an int or a tuple of 1 to 3 ints"),
])
def test_grid_and_block_limits(grid, block, message):
    kernel, fn = kernel_with_fake_function(PLAIN)
    with pytest.raises(LaunchConfigError, match=message):
        validate(kernel, fn, grid, block)


def test_register_limited_block_size():
    kernel, fn = kernel_with_fake_function(PLAIN, max_threads=640, num_regs=96)
    with pytest.raises(LaunchConfigError, match="768 threads; with 96 registers per thread it can run at most 640"):
        validate(kernel, fn, block=768)
    assert validate(kernel, fn, block=640) == ((1, 1, 1, 640, 1, 1, 0), None)


def test_reqntid_and_maxntid():
    kernel, fn = kernel_with_fake_function(".visible .entry k() .reqntid 128, 1, 1 { ret; }")
    with pytest.raises(LaunchConfigError, match=r"block = \(256, 1, 1\) but the PTX requires exactly .reqntid "
                                                r"\(128, 1, 1\)"):
        validate(kernel, fn, block=256)
    validate(kernel, fn, block=(128, 1, 1))
    kernel, fn = kernel_with_fake_function(".visible .entry k() .maxntid 384 { ret; }")
    with pytest.raises(LaunchConfigError, match=r"416 threads; .maxntid \(384, 1, 1\) allows at most 384"):
        validate(kernel, fn, block=416)
    validate(kernel, fn, block=(128, 3))


def test_dynamic_shared_memory_limit_names_both_numbers():
    kernel, fn = kernel_with_fake_function(PLAIN, static_smem=1024)
    with pytest.raises(LaunchConfigError, match=r"asks for 231425 bytes of dynamic shared memory, but with its 1024 "
                                                r"bytes of static shared memory at most 231424 fit \(device 0 allows "
                                                r"232448 bytes per block after opting in\)"):
        validate(kernel, fn, smem=231425)
    with pytest.raises(LaunchConfigError, match="smem_bytes = -1 must be an int >= 0"):
        validate(kernel, fn, smem=-1)
    validate(kernel, fn, smem=48 * 1024 - 1024)  # fits the default: no opt-in call (no driver here)
    assert fn._dynamic_smem_limit == 48 * 1024 - 1024


def test_opt_in_is_set_once_per_function(monkeypatch):
    calls = []

    class FakeBindings:
        class CUfunction_attribute:
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

        @staticmethod
        def cuFuncSetAttribute(handle, attr, value):
            calls.append((attr, value))
            return (0,)

    monkeypatch.setattr(driver, "bindings", lambda: FakeBindings)
    kernel, fn = kernel_with_fake_function(PLAIN)
    for _ in range(3):
        fn.ensure_dynamic_smem(100_000)
    fn.ensure_dynamic_smem(50_000)
    fn.ensure_dynamic_smem(200_000)
    assert calls == [(8, 100_000), (8, 200_000)]


def test_cluster_dims():
    kernel, fn = kernel_with_fake_function(PLAIN)
    with pytest.raises(LaunchConfigError, match=r"grid.x = 3 is not divisible by cluster.x = 2; the grid must be a "
                                                r"whole number of clusters"):
        validate(kernel, fn, grid=3, cluster=(2, 1, 1))
    with pytest.raises(LaunchConfigError, match=r"cluster = \(4, 4, 1\) must have dims >= 1 and at most 8 CTAs"):
        validate(kernel, fn, grid=(4, 4), cluster=(4, 4))
    with pytest.raises(LaunchConfigError, match=r"cluster = \(0, 1, 1\) must have dims >= 1"):
        validate(kernel, fn, grid=4, cluster=0)
    assert kernel._cluster_dims((4, 2, 1), (2, 2)) == (2, 2, 1)


def test_cluster_directives():
    kernel, fn = kernel_with_fake_function(".visible .entry k() .reqnctapercluster 2, 1, 1 { ret; }")
    with pytest.raises(LaunchConfigError, match=r"grid.x = 5 is not divisible by cluster.x = 2"):
        validate(kernel, fn, grid=5)
    with pytest.raises(LaunchConfigError, match=r"cluster = \(4, 1, 1\) but the PTX fixes .reqnctapercluster "
                                                r"\(2, 1, 1\)"):
        validate(kernel, fn, grid=8, cluster=4)
    assert validate(kernel, fn, grid=8)[1] is None  # a plain launch runs as clusters of 2
    kernel, fn = kernel_with_fake_function(".visible .entry k() .explicitcluster { ret; }")
    with pytest.raises(LaunchConfigError, match="declared .explicitcluster: pass cluster="):
        validate(kernel, fn, grid=8)


def test_a_cubin_without_ptx_needs_a_signature():
    from layoutkit.ptx import SignatureError
    with pytest.raises(SignatureError, match="carries no PTX text"):
        CompiledKernel(b"\x7fELF")
    with pytest.raises(SignatureError, match="name = 'other' but the signature is of kernel 'plain'"):
        CompiledKernel(b"\x7fELF", "other", signature=parse_entry(PLAIN))


class NoDriver:
    """cuda-python installed, libcuda.so missing: every driver call raises RuntimeError."""

    def __getattr__(self, name):
        def call(*args):
            raise RuntimeError("Failed to dlopen libcuda.so.1")
        return call


@pytest.fixture
def no_driver(monkeypatch):
    monkeypatch.setattr(driver, "bindings", lambda: NoDriver())
    monkeypatch.setattr(driver, "_initialized", False)
    monkeypatch.setattr(driver, "_devices", {})


def test_missing_driver_library_is_a_clear_error(no_driver):
    with pytest.raises(DriverUnavailableError, match=r"cuInit failed with no driver library: the NVIDIA driver "
                                                     r"library could not be loaded \(Failed to dlopen libcuda.so.1\)"):
        driver.device_count()
    with pytest.raises(DriverUnavailableError, match="cuInit failed"):
        driver.device(0)


def test_launch_without_a_driver_is_a_clear_error(no_driver):
    kernel = CompiledKernel(b"\x7fELF", signature=parse_entry(PLAIN))
    with pytest.raises(DriverUnavailableError, match="cuInit failed"):
        kernel.launch(5, grid=1, block=32)


def test_tensor_map_and_buffers_without_a_driver(no_driver):
    from layoutkit.ptx import DeviceBuffer, TensorMap
    with pytest.raises(DriverUnavailableError, match="cuInit failed"):
        TensorMap.from_address(0x10000, "float32", shape=(16, 16), strides=(16, 1), box=(16, 16))
    with pytest.raises(DriverUnavailableError, match="cuInit failed"):
        DeviceBuffer.empty((4, 4), "float32")


def test_driver_results_become_cuda_driver_errors():
    from cuda.bindings.driver import CUresult
    with pytest.raises(CudaDriverError, match=r"cuModuleLoadData failed with CUDA_ERROR_NO_BINARY_FOR_GPU: the cubin "
                                              r"was built for another GPU architecture"):
        driver.check((CUresult.CUDA_ERROR_NO_BINARY_FOR_GPU,), "cuModuleLoadData")
    with pytest.raises(DriverUnavailableError, match="CUDA_ERROR_NO_DEVICE: no CUDA-capable device"):
        driver.check((CUresult.CUDA_ERROR_NO_DEVICE, None), "cuDeviceGetCount")
    assert driver.check((CUresult.CUDA_SUCCESS, 3), "x") == 3
    assert driver.check((CUresult.CUDA_SUCCESS, 3, 4), "x") == (3, 4)
    assert driver.check((CUresult.CUDA_SUCCESS,), "x") is None


def test_importing_layoutkit_ptx_needs_no_cuda_python():
    script = textwrap.dedent("""
        import sys
        sys.modules["cuda"] = None  # any import of cuda.* now fails
        sys.modules["cuda.bindings"] = None
        import layoutkit.ptx as ptx
        sig = ptx.parse_entry(".visible .entry k(.param .u32 n) { ret; }")
        assert ptx.CompiledKernel(b"", signature=sig).pack(3) == bytes([3, 0, 0, 0])
        try:
            ptx.device_count()
        except ptx.DriverUnavailableError as exc:
            print(exc)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "import cuda.bindings.driver failed with ImportError: cuda-python is not installed" in done.stdout


def test_launch_calls_the_driver_with_the_cached_plan_and_the_right_stream(monkeypatch):
    import types

    from layoutkit.ptx import arguments, launch

    class Tensor:
        def __init__(self, dev=0):
            self.dev = dev

        def data_ptr(self):
            return 0x7F00_0000_1000

        def get_device(self):
            return self.dev

    current = {0: 0xAB0}
    fake_torch = types.SimpleNamespace(Tensor=Tensor, _C=types.SimpleNamespace(
        _cuda_getCurrentRawStream=lambda index: current[index]))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setattr(arguments, "_torch_tensor", None)
    monkeypatch.setattr(launch, "_torch_stream_getter", None)
    kernel, fn = kernel_with_fake_function(".entry k(.param .u64 x, .param .u32 n) { ret; }")
    kernel._functions[0] = fn
    calls = []
    kernel._launch_kernel = lambda *a: calls.append(a) or (0,)
    kernel.launch(Tensor(), 3, grid=(4, 2), block=128)
    kernel.launch(Tensor(), 3, grid=(4, 2), block=128, stream=0x77)
    current[0] = 0xAB8
    kernel.launch(Tensor(), 3, grid=(4, 2), block=128)
    handles = [int(c[8]) for c in calls]
    assert handles == [0xAB0, 0x77, 0xAB8]  # torch's current stream, unless stream= says otherwise
    assert calls[0][:8] == (None, 4, 2, 1, 128, 1, 1, 0)
    assert calls[0][9] == kernel._state().packer.kernel_params and calls[0][10] == 0
    with pytest.raises(LaunchConfigError, match="block.x = 2048"):
        kernel.launch(Tensor(), 3, grid=1, block=2048)
    kernel.launch(Tensor(), 3, grid=(4, 2), block=128)  # the refused shape left no stale plan behind
    assert calls[-1][:8] == calls[0][:8]


def test_a_grid_list_changed_in_place_is_checked_again(monkeypatch):
    kernel, fn = kernel_with_fake_function(PLAIN)
    kernel._functions[0] = fn
    calls = []
    kernel._launch_kernel = lambda *a: calls.append(a) or (0,)
    monkeypatch.setattr(driver, "current_device", lambda: fn.device)
    grid = [1, 1]
    kernel.launch(1, grid=grid, block=32)
    grid[0] = 6
    kernel.launch(1, grid=grid, block=32)
    assert [c[1] for c in calls] == [1, 6]
