"""The DSL's launch path on the CPU: `kernel[grid](...)` reaches the driver through one configured
launcher per grid, with the key's facts as the compiled kernel's parameter checks.

A fake torch (exact-type Tensor with data_ptr/get_device/dtype), a fake loaded function and a
recording cuLaunchKernel stand in for the GPU; ptxas assembles the real PTX.
"""
import ctypes
import sys
import types

import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import Layout
from layoutkit.ptx import Device, LoadedFunction, ParamKind
from layoutkit.ptx import arguments, driver, launch

BASE = 0x7F00_0000_0000


@lk.kernel(num_warps=2)
def scale(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], n: lk.i64, a: lk.f32):
    """y = a * x over n elements, 4 per thread."""
    tv = lk.tv_layout(Layout(64), Layout(4))
    X = lk.global_tensor(x, Layout(n)).tile((256,), (lk.block_id(0),)).partition(tv)
    Y = lk.global_tensor(y, Layout(n)).tile((256,), (lk.block_id(0),)).partition(tv)
    lk.store(Y, lk.load(X) * a)


class Tensor:
    """Stands for a CUDA torch.Tensor of float32."""

    dtype = "torch.float32"

    def __init__(self, ptr):
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr

    def get_device(self):
        return 0


@pytest.fixture
def fake_gpu(monkeypatch):
    """(spec of `scale` for aligned pointers, list of recorded driver calls)."""
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        Tensor=Tensor, _C=types.SimpleNamespace(_cuda_getCurrentRawStream={0: 0xAB0}.get)))
    monkeypatch.setattr(arguments, "_torch_tensor", None)
    monkeypatch.setattr(launch, "_torch_stream_getter", None)
    spec = scale.specialize(Tensor(BASE), Tensor(BASE + 0x1000), 4096, 2.0)
    spec._compiled, spec._launchers = None, {}  # a fresh CompiledKernel for this test's fakes
    compiled = spec.compiled
    dev = Device(0, None, None, {"MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,
                                 "MAX_SHARED_MEMORY_PER_BLOCK": 49152})
    compiled._functions[0] = LoadedFunction(compiled.name, dev, "fn0", 0, 32, 1024)
    monkeypatch.setattr(driver, "current_device", lambda: dev)
    calls = []

    def record(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        first = ctypes.c_void_p.from_address(params).value
        calls.append(((gx, gy, gz, bx, by, bz, smem), int(stream),
                      ctypes.string_at(first, compiled._state().packer.size), params))
        return (0,)

    compiled._launch_kernel = record
    yield spec, calls
    spec._compiled, spec._launchers = None, {}


def test_the_key_facts_become_parameter_checks(fake_gpu):
    spec, _ = fake_gpu
    x, y, n, a = spec.compiled.signature.params
    assert (x.kind, x.pointer_align, x.dtype) == (ParamKind.POINTER, 16, "f32")
    assert (n.kind, n.ptx_type, a.kind) == (ParamKind.INT, "s64", ParamKind.FLOAT)
    unaligned = scale.specialize(Tensor(BASE + 4), Tensor(BASE), 4096, 2.0)
    assert unaligned.param_specs()[0].pointer_align == 4  # element-aligned only


def test_launches_reuse_one_configured_launcher_per_grid(fake_gpu):
    spec, calls = fake_gpu
    x, y = Tensor(BASE), Tensor(BASE + 0x1000)
    scale[16](x, y, 4096, 2.0)
    scale[16](x, y, 4096, 2.0)
    scale[(8, 1)](x, y, 2048, 0.5)
    assert list(spec._launchers) == [16, (8, 1)]
    launcher_params = spec._launchers[16].__globals__["params"]
    assert [c[3] for c in calls] == [launcher_params, launcher_params, spec._launchers[(8, 1)].__globals__["params"]]
    assert calls[0][:2] == ((16, 1, 1, 64, 1, 1, 0), 0xAB0) and calls[2][0][:3] == (8, 1, 1)
    assert calls[0][2][:16] == BASE.to_bytes(8, "little") + (BASE + 0x1000).to_bytes(8, "little")
    assert calls[0][2][16:24] == (4096).to_bytes(8, "little")
    scale[16](x, y, 4096, 2.0, stream=0x77)  # an explicit stream: launch() with the same bytes
    assert calls[-1][1:3] == (0x77, calls[0][2])
