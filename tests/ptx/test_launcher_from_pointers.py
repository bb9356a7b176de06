"""A configured launcher's second entry, ``launcher.from_pointers(*args, *pointers)``: for callers
that have checked the arguments' exact types and read the pointers (the DSL's fast path). It must
make the driver call ``launcher(*args)`` makes, share its buffer and memo and busy guard, and send
every argument it cannot launch (another device, a misaligned pointer, a value that does not pack)
to ``launch()``, which words the error. Fakes: tests/ptx/test_launch_configured.
"""
import sys
import threading
import types

import pytest

from layoutkit.ptx import LaunchArgumentError, arguments, launch
from layoutkit.ptx import launcher as launcher_module
from tests.ptx.test_launch_configured import BASE, PTX, Tensor, fake_kernel, torch_streams  # noqa: F401

TYPED = (".visible .entry k(.param .u64 .ptr.align 16 x, .param .u64 .ptr.align 4 y, .param .u32 n, "
         ".param .f32 a) { ret; }")


def args(dev=0, x=BASE + 0x100, y=BASE + 0x204, n=4_000_000_000, a=0.5):
    return Tensor(x, dev), Tensor(y, dev), n, a


def pointers(values):
    return values + (values[0].data_ptr(), values[1].data_ptr())


@pytest.mark.parametrize("devices", [(0,), (0, 1)])
def test_it_makes_the_launchers_driver_call_and_shares_its_memo(torch_streams, monkeypatch, devices):  # noqa: F811
    kernel, recorder = fake_kernel(TYPED, devices=devices, monkeypatch=monkeypatch)
    launcher = kernel.configure((4, 2), 128, smem_bytes=256)
    launcher(*args())
    launcher.from_pointers(*pointers(args()))
    launcher.from_pointers(*pointers(args(n=7, a=0.25)))
    launcher(*args(n=7, a=0.25))
    by_launcher, shared, other, again = recorder.calls
    assert shared == by_launcher and again == other and other[:3] == by_launcher[:3]
    assert other[3] != by_launcher[3] and other[4] == by_launcher[4] != kernel._state().packer.kernel_params


def test_a_signature_with_an_untyped_64_bit_parameter_has_none(torch_streams, monkeypatch):  # noqa: F811
    kernel, _ = fake_kernel(PTX, monkeypatch=monkeypatch)
    assert kernel.configure(1, 32).from_pointers is None
    kernel, _ = fake_kernel(TYPED, monkeypatch=monkeypatch)
    assert "def launcher_from_pointers(x, y, n, a, p0, p1, /):" in kernel.configure(1, 32).source


def test_another_device_launches_through_launch_on_that_device(torch_streams, monkeypatch):  # noqa: F811
    kernel, recorder = fake_kernel(TYPED, devices=(0, 1), monkeypatch=monkeypatch)
    launcher = kernel.configure(1, 32)
    launcher.from_pointers(*pointers(args(dev=1)))
    kernel.launch(*args(dev=1), grid=1, block=32)
    assert recorder.calls[0][:4] == recorder.calls[1][:4] and recorder.calls[0][0] == "fn1"
    assert recorder.calls[0][2] == 0xCD0      # device 1's current stream


@pytest.mark.parametrize("devices, values, message", [
    ((0,), args(dev=-1), "the torch tensor is on cpu"),
    ((0, 1), args(dev=-1), "the torch tensor is on cpu"),
    ((0,), args(x=BASE + 0x104), "16-byte aligned"),
    ((0,), args(y=BASE + 0x202), "4-byte aligned"),
    ((0,), args(n=2 ** 32), "this parameter holds integers in 0..4294967295"),
])
def test_what_it_cannot_launch_is_refused_with_launchs_message(torch_streams, monkeypatch, devices, values,  # noqa: F811
                                                              message):
    kernel, recorder = fake_kernel(TYPED, devices=devices, monkeypatch=monkeypatch)
    launcher = kernel.configure(1, 32)
    with pytest.raises(LaunchArgumentError, match=message) as by_launch:
        kernel.launch(*values, grid=1, block=32)
    with pytest.raises(LaunchArgumentError) as by_entry:
        launcher.from_pointers(*pointers(values))
    assert str(by_entry.value) == str(by_launch.value) and recorder.calls == []
    launcher.from_pointers(*pointers(args()))
    launcher(*args())
    assert recorder.calls[0] == recorder.calls[1]    # the failed pack left no stale memo


@pytest.mark.parametrize("values, message", [
    (args(x=BASE + 0x108), "16-byte aligned"), (args(y=BASE + 0x206), "4-byte aligned")])
@pytest.mark.parametrize("entry", ["launcher", "from_pointers"])
def test_a_misaligned_pointer_beside_the_held_values_is_refused(torch_streams, monkeypatch, values,  # noqa: F811
                                                              message, entry):
    """The alignment is tested where a value differs from the last packed one: a misaligned
    pointer whose other arguments are the held ones still reaches launch()'s error."""
    kernel, recorder = fake_kernel(TYPED, monkeypatch=monkeypatch)
    launcher = kernel.configure(1, 32)
    launcher(*args())
    launcher.from_pointers(*pointers(args()))
    call = launcher if entry == "launcher" else lambda *v: launcher.from_pointers(*pointers(v))
    with pytest.raises(LaunchArgumentError, match=message):
        call(*values)
    call(*args())
    assert len(recorder.calls) == 3 and recorder.calls[2] == recorder.calls[0]


@pytest.mark.parametrize("gil", [True, False])
def test_a_call_during_a_launch_takes_its_own_buffer(torch_streams, monkeypatch, gil):  # noqa: F811
    """The two entries share one busy guard: a from_pointers call while the launcher's driver call
    reads the buffer (another thread, or re-entrant) must not write that buffer."""
    monkeypatch.setattr(launcher_module, "gil_guards_launches", lambda: gil)
    kernel, recorder = fake_kernel(TYPED, monkeypatch=monkeypatch)
    launcher = kernel.configure(1, 32)
    launcher(*args())
    mine = recorder.calls[-1]

    def other():
        thread = threading.Thread(target=lambda: launcher.from_pointers(*pointers(args(n=9))))
        thread.start()
        thread.join()

    recorder.during = other
    launcher(*args())
    during, after = recorder.calls[-2:]
    assert after == mine and during[4] != mine[4] and during[3] != mine[3]


def test_the_two_entries_share_one_memo(torch_streams, monkeypatch):  # noqa: F811
    """What one entry packed, the other must not take for its own last values."""
    kernel, recorder = fake_kernel(TYPED, devices=(0,), monkeypatch=monkeypatch)
    launcher = kernel.configure(1, 32)
    launcher(*args())
    launcher.from_pointers(*pointers(args(n=7)))
    launcher(*args())
    launcher.from_pointers(*pointers(args(n=7)))
    first, other, again, other_again = recorder.calls
    assert again[3] == first[3] != other[3] == other_again[3]


def test_a_launcher_configured_before_torch_learns_its_tensors_at_the_checked_path(monkeypatch):
    """from_pointers tests the pointers' type itself: a launcher made while torch was not yet
    imported sends tensors to launch(), which binds torch's tensor type and stream query."""
    kernel, recorder = fake_kernel(TYPED, devices=(0,), monkeypatch=monkeypatch)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(arguments, "_torch_tensor", None)
    monkeypatch.setattr(launch, "_torch_stream_getter", None)
    launcher = kernel.configure(1, 32)
    fake = types.SimpleNamespace(Tensor=Tensor, _C=types.SimpleNamespace(_cuda_getCurrentRawStream={0: 0xAB0}.get))
    monkeypatch.setitem(sys.modules, "torch", fake)
    launcher.from_pointers(*pointers(args()))
    launcher.from_pointers(*pointers(args()))
    by_launch = kernel.launch(*args(), grid=1, block=32) or recorder.calls[-1]
    assert recorder.calls[0][:4] == recorder.calls[1][:4] == by_launch[:4]
    assert recorder.calls[1][4] != by_launch[4]          # the second went through the launcher's buffer
