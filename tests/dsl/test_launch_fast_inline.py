"""The DSL fast path's own launch (layoutkit.dsl.core.launch_fast with layoutkit.ptx.launcher's
LaunchParts) on the CPU: `kernel[grid]` keeps the parts of the specialization it last launched
and launches from them with a parameter buffer of its own; the same facts do no lookup, other
facts look up the right parts, and every call it cannot launch itself (a call in progress,
another torch, another device, a failed pack, a driver error) is launched or worded by the
checked path, never with stale parameters. Fakes: tests/dsl/fake_gpu.py.
"""
import struct
import sys

import pytest

import layoutkit.dsl as lk
from layoutkit.dsl.core.launch_fast import plain_grid
from layoutkit.ptx import CudaDriverError, LaunchArgumentError, driver
from layoutkit.ptx.launcher import LaunchParts

from .fake_gpu import BASE, FakeGPU, Tensor, fake_torch


@lk.kernel(num_warps=1)
def axpy(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], n: lk.i32, a: lk.f32):
    """No body: the launch is what is tested."""


@lk.kernel(num_warps=1)
def tagged(x: lk.Pointer[lk.f32], n: lk.i32, V: lk.constexpr):
    """A constexpr of any value."""


@lk.kernel(num_warps=1)
def touch(x: lk.Pointer[lk.f32]):
    """One parameter: one packed value."""


X, Y = Tensor(BASE), Tensor(BASE + 0x10000)


def packed(x, y, n, a) -> bytes:
    return struct.pack("<QQif", x.ptr, y.ptr, n, a)


@pytest.fixture
def gpu(monkeypatch):
    fake = FakeGPU(monkeypatch, [axpy, tagged, touch])
    yield fake
    fake.reset()


@pytest.fixture
def checked(monkeypatch):
    """The calls that went through Kernel.launch (the checked path), per kernel name."""
    calls = []
    for k in (axpy, tagged, touch):
        def spy(grid, *args, _real=k.launch, _name=k.name, **kwargs):
            calls.append(_name)
            return _real(grid, *args, **kwargs)
        monkeypatch.setitem(k.__dict__, "launch", spy)
    return calls


class Lookups(dict):
    """A fast path's remembered launchers that records the keys looked up."""

    def __init__(self, entries):
        super().__init__(entries)
        self.keys = []

    def get(self, key, default=None):
        self.keys.append(key)
        return super().get(key, default)


def test_the_fast_path_launches_from_the_parts_with_a_buffer_of_its_own(gpu, checked):
    axpy[2](X, Y, 4096, 2.0)
    axpy[2](X, Y, 4096, 2.0)
    (parts,) = axpy._fast.launchers.values()
    assert isinstance(parts, LaunchParts) and (parts.gx, parts.bx, parts.smem) == (2, 32, 0)
    assert parts.params != parts.launcher.__globals__["params"]      # not the launcher's buffer
    parts.launcher(X, Y, 4096, 2.0)                 # the launcher's own memo: nothing stale
    axpy[2](Tensor(BASE + 0x20000), Y, 4096, 2.0)
    assert checked == ["axpy"]
    assert [c.packed for c in gpu.calls] == [packed(X, Y, 4096, 2.0)] * 3 + [
        packed(Tensor(BASE + 0x20000), Y, 4096, 2.0)]


def test_the_same_facts_do_no_lookup_and_other_facts_look_up_theirs(gpu, checked):
    for n in (4096, 4095):
        axpy[2](X, Y, n, 2.0)                        # both specializations remembered
    lookups = axpy._fast.namespace["_lk_launchers"] = Lookups(axpy._fast.launchers)
    axpy[2](X, Y, 4096, 2.0)                         # no parts held yet: a lookup
    axpy[2](Tensor(BASE + 0x20000), Y, 8192, 0.5)   # the same facts: none
    axpy[2](X, Y, 4095, 2.0)
    axpy[2](X, Y, 17, 2.0)
    axpy[2](X, Y, 4096, 2.0)
    assert [key[2] for key in lookups.keys] == ["16", "+", "16"]
    assert checked == ["axpy", "axpy"]
    specs = [c.spec for c in gpu.calls]
    assert specs[2] is specs[3] is specs[6] is specs[0]
    assert specs[4] is specs[5] is specs[1] is not specs[0]
    assert [c.packed for c in gpu.calls[3:]] == [packed(Tensor(BASE + 0x20000), Y, 8192, 0.5),
                                                 packed(X, Y, 4095, 2.0), packed(X, Y, 17, 2.0),
                                                 packed(X, Y, 4096, 2.0)]


def test_an_alignment_the_facts_do_not_imply_is_tested_by_from_pointers(gpu, checked):
    """An unaligned f32 pointer's specialization requires 4-byte alignment, which the key's
    16-byte fact does not say: the fast path keeps its launcher's from_pointers, which tests it."""
    x4, x2 = Tensor(BASE + 4), Tensor(BASE + 2)
    axpy[2](x4, Y, 4096, 2.0)
    axpy[2](x4, Y, 4096, 2.0)
    (entry,) = axpy._fast.launchers.values()
    assert not isinstance(entry, LaunchParts) and entry.__name__ == "launcher_from_pointers"
    with pytest.raises(LaunchArgumentError, match="align"):
        axpy[2](x2, Y, 4096, 2.0)
    assert checked == ["axpy"] and [c.packed for c in gpu.calls] == [packed(x4, Y, 4096, 2.0)] * 2


def test_a_kernel_of_one_parameter_launches_from_its_parts(gpu, checked):
    for x in (X, X, Tensor(BASE + 0x20000), X):
        touch[3](x)
    assert checked == ["touch"] and isinstance(next(iter(touch._fast.launchers.values())), LaunchParts)
    assert [c.packed for c in gpu.calls] == [struct.pack("<Q", x.ptr) for x in
                                             (X, X, Tensor(BASE + 0x20000), X)]


def test_a_held_from_pointers_entry_is_called_without_a_lookup_for_the_same_facts(gpu, checked):
    x4 = Tensor(BASE + 4)                            # its launcher's from_pointers tests alignment
    for x in (X, X, x4):
        axpy[2](x, Y, 4096, 2.0)                     # both specializations remembered
    lookups = axpy._fast.namespace["_lk_launchers"] = Lookups(axpy._fast.launchers)
    calls = [(x4, 4096), (x4, 4096), (Tensor(BASE + 0x20004), 8192), (x4, 4096), (X, 4096),
             (X, 4096), (x4, 4096)]
    for x, n in calls:
        axpy[2](x, Y, n, 2.0)
    assert [key[0] for key in lookups.keys] == [False, True, False]     # at each change of facts
    assert checked == ["axpy", "axpy"]
    assert [c.packed for c in gpu.calls[3:]] == [packed(x, Y, n, 2.0) for x, n in calls]


def test_without_the_gil_nothing_is_held_and_every_call_looks_up(monkeypatch):
    """On a free-threaded build the busy flag guards nothing: no LaunchParts, no held entry."""
    from layoutkit.dsl.core import launch_fast
    from layoutkit.ptx import launcher
    monkeypatch.setattr(launch_fast, "gil_guards_launches", lambda: False)
    monkeypatch.setattr(launcher, "gil_guards_launches", lambda: False)

    @lk.kernel(num_warps=1)
    def free(x: lk.Pointer[lk.f32], n: lk.i32):
        """No body."""
    gpu = FakeGPU(monkeypatch, [free])
    try:
        free[1](X, 64)
        (entry,) = free._fast.launchers.values()
        assert entry.__name__ == "launcher_from_pointers"
        lookups = free._fast.namespace["_lk_launchers"] = Lookups(free._fast.launchers)
        for n in (64, 64, 32):
            free[1](X, n)
        assert len(lookups.keys) == 3 and free[1].__globals__["_lk_entry"] is None
        assert [c.packed for c in gpu.calls] == [struct.pack("<Qi", X.ptr, n) for n in (64, 64, 64, 32)]
    finally:
        gpu.reset()


def test_an_equal_constexpr_that_is_another_object_is_looked_up(gpu, checked):
    for text in ("100000", "100000", "100000", "7"):
        tagged[1](X, 4096, int(text))                # a new int object each time
    assert checked == ["tagged", "tagged"]           # 100000 once, 7 once
    keys = [c.spec.key[2] for c in gpu.calls]
    assert keys == [("int", 100000)] * 3 + [("int", 7)]


def test_a_call_while_one_is_launching_takes_the_checked_path(gpu, checked):
    axpy[2](X, Y, 4096, 2.0)
    launch, inner = gpu.launch, []

    def reentrant(*args):
        if not inner:
            inner.append(True)
            axpy[2](Tensor(BASE + 0x30000), Y, 64, 3.0)   # from inside the driver call
        return launch(*args)
    parts = next(iter(axpy._fast.launchers.values()))
    axpy._fast.launchers[next(iter(axpy._fast.launchers))] = parts._replace(launch=reentrant)
    axpy[2](X, Y, 4096, 2.0)
    axpy[2](X, Y, 4096, 2.0)                         # not busy any more: fast again
    assert checked == ["axpy", "axpy"]
    assert [c.packed for c in gpu.calls] == [packed(X, Y, 4096, 2.0),
                                             packed(Tensor(BASE + 0x30000), Y, 64, 3.0),
                                             packed(X, Y, 4096, 2.0), packed(X, Y, 4096, 2.0)]


def test_a_driver_error_is_raised_worded_and_the_next_launch_runs(gpu, checked):
    axpy[2](X, Y, 4096, 2.0)
    key = next(iter(axpy._fast.launchers))
    error = driver.bindings().CUresult.CUDA_ERROR_INVALID_VALUE
    axpy._fast.launchers[key] = axpy._fast.launchers[key]._replace(launch=lambda *args: (error,))
    with pytest.raises(CudaDriverError,
                       match=r"cuLaunchKernel\('axpy'\) failed with CUDA_ERROR_INVALID_VALUE"):
        axpy[2](X, Y, 4096, 2.0)
    with pytest.raises(CudaDriverError):
        axpy[2](X, Y, 4096, 2.0)                     # held: the same parts, not busy
    assert checked == ["axpy"] and len(gpu.calls) == 1


def test_a_tensor_on_another_device_goes_to_the_checked_path(gpu, checked):
    axpy[2](X, Y, 4096, 2.0)
    axpy[2](X, Y, 4096, 2.0)
    try:
        axpy[2](Tensor(BASE + 0x20000, device=1), Y, 4096, 2.0)
    except Exception:   # noqa: BLE001 - what the checked path makes of device 1 is not tested here
        pass
    assert checked == ["axpy", "axpy"]
    assert all(c.packed != packed(Tensor(BASE + 0x20000), Y, 4096, 2.0) for c in gpu.calls[:2])


def test_another_torch_never_launches_from_the_held_parts(gpu, checked, monkeypatch):
    axpy[2](X, Y, 4096, 2.0)
    axpy[2](X, Y, 4096, 2.0)
    other = fake_torch()
    other.Tensor = type("Tensor", (Tensor,), {})     # another torch's tensor type
    monkeypatch.setitem(sys.modules, "torch", other)
    x, y = other.Tensor(BASE + 0x20000), other.Tensor(BASE + 0x30000)
    axpy[2](x, y, 4096, 2.0)
    axpy[2](x, y, 4096, 2.0)
    assert checked == ["axpy"] * 2       # the new torch's first: the checked path (then ptx's)
    assert [c.packed for c in gpu.calls[2:]] == [packed(x, y, 4096, 2.0)] * 2
    assert all(not isinstance(e, LaunchParts) or e.tensor_type is other.Tensor
               for e in axpy._fast.launchers.values())


def test_a_failed_pack_leaves_no_stale_parameters(gpu, checked):
    X2, Y2 = Tensor(BASE + 0x40000), Tensor(BASE + 0x50000)
    axpy[2](X, Y, 4096, 2.0)
    axpy[2](X, Y, 4096, 2.0)
    with pytest.raises(LaunchArgumentError, match="overflows .f32"):
        axpy[2](X2, Y2, 4096, 1e39)                 # pack_into fails after writing x and y
    axpy[2](X, Y, 4096, 2.0)
    assert [c.packed for c in gpu.calls] == [packed(X, Y, 4096, 2.0)] * 3


def test_a_checked_launch_of_a_remembered_specialization_keeps_its_parts(gpu, checked):
    axpy[2](X, Y, 4096, 2.0)
    (parts,) = axpy._fast.launchers.values()
    axpy[2](X, Y, 4096, 5)                           # an int for a: the checked path
    axpy[2](X, Y, 4096, 2.0, stream=0xAB0)           # an explicit stream: the checked path
    assert list(axpy._fast.launchers.values()) == [parts]
    axpy[2](X, Y, 4096, 2.0)
    assert checked == ["axpy"] * 3 and len(gpu.calls) == 4


def test_with_one_visible_device_is_cuda_is_the_device_test(gpu, checked, monkeypatch):
    monkeypatch.setattr(driver, "device_count", lambda: 1)
    monkeypatch.setattr(driver, "initialize", lambda: None)
    axpy[2](X, Y, 4096, 2.0)
    (parts,) = axpy._fast.launchers.values()
    assert parts.only_device is True
    axpy[2](X, Y, 4096, 2.0)
    with pytest.raises(LaunchArgumentError, match="the torch tensor is on cpu, not on a CUDA device"):
        axpy[2](Tensor(BASE + 0x20000, device=-1), Y, 4096, 2.0)    # worded by the checked path
    assert checked == ["axpy", "axpy"] and len(gpu.calls) == 2


@pytest.mark.parametrize("grid, plain", [
    (1, True), (0, True), ((4,), True), ((1, 2), True), ((1, 2, 3), True), ((), False),
    ((1, 2, 3, 4), False), (1.0, False), (True, False), ((True,), False), ((1, 2.0), False),
    ((1, 2, True), False), ([1], False), ((1, (2,)), False), (None, False), ("1", False)])
def test_plain_grids_are_exact_ints_or_tuples_of_one_to_three(grid, plain):
    assert plain_grid(grid) is plain
