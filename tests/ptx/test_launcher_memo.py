"""The configured launcher's packing memo: a launch whose values equal the last packed ones skips
``pack_into``; every other launch packs, and what reaches the driver is always what ``launch()``
would pack. Fakes as in test_launch_configured (a recording cuLaunchKernel, a fake torch).
"""
import struct

import pytest

from layoutkit.ptx import LaunchArgumentError
from tests.ptx.test_launch_configured import BASE, Tensor, fake_kernel, good_args, torch_streams  # noqa: F401


class CountingPack:
    """Stands for the launcher's ``pack_into``, counting its calls."""

    def __init__(self, launcher):
        self.real, self.calls = launcher.__globals__["pack_into"], 0
        launcher.__globals__["pack_into"] = self

    def __call__(self, *args):
        self.calls += 1
        return self.real(*args)


def expected(x, y, n, a) -> bytes:
    """The PTX signature's buffer: x (u64), y (u64), n (u32), a (f32)."""
    return struct.pack("<QQIf", x.data_ptr(), y.data_ptr(), n, a)


@pytest.fixture
def configured(torch_streams, monkeypatch):  # noqa: F811
    kernel, recorder = fake_kernel(monkeypatch=monkeypatch)
    launcher = kernel.configure(1, 32)
    return kernel, recorder, launcher, CountingPack(launcher)


def test_equal_values_are_not_packed_again(configured):
    _, recorder, launcher, pack = configured
    args = good_args()
    launcher(*args)
    launcher(*args)
    launcher(*good_args())  # other tensor objects, same addresses: the buffer already holds them
    assert pack.calls == 1
    assert [c[3] for c in recorder.calls] == [expected(*args)] * 3


@pytest.mark.parametrize("change", [0, 1, 2, 3])
def test_any_changed_value_is_packed(configured, change):
    _, recorder, launcher, pack = configured
    args = list(good_args())
    launcher(*args)
    args[change] = [Tensor(BASE + 0x1000), Tensor(BASE + 0x2008), 7, 0.25][change]
    launcher(*args)
    assert pack.calls == 2 and recorder.calls[-1][3] == expected(*args)


def test_floats_are_compared_by_identity_not_value(configured):
    _, recorder, launcher, pack = configured
    x, y, n, _ = good_args()
    launcher(x, y, n, 0.0)
    launcher(x, y, n, -0.0)  # equal to 0.0, other bytes (the sign bit)
    assert pack.calls == 2 and recorder.calls[-1][3][-4:] == struct.pack("<f", -0.0)


def test_a_pack_that_fails_part_way_leaves_no_stale_memo(configured):
    """pack_into writes the fields before the one it cannot pack: the next launch with the old
    values must pack them again."""
    kernel, recorder, launcher, pack = configured
    args = good_args()
    launcher(*args)
    changed = (Tensor(BASE + 0x1000), Tensor(BASE + 0x2000), 2 ** 32, 0.5)
    with pytest.raises(LaunchArgumentError, match="got 4294967296; this parameter holds integers in 0..4294967295"):
        launcher(*changed)
    launcher(*args)
    assert recorder.calls[-1][3] == expected(*args)
    assert recorder.calls[-1][4] == recorder.calls[0][4] != kernel._state().packer.kernel_params


def test_a_misaligned_pointer_after_a_memo_is_refused_and_the_memo_still_holds(configured):
    _, recorder, launcher, pack = configured
    args = good_args()
    launcher(*args)
    with pytest.raises(LaunchArgumentError, match="the address 0x7f0000000104 must be 16-byte aligned"):
        launcher(Tensor(BASE + 0x104), *args[1:])
    launcher(*args)
    assert len(recorder.calls) == 2 and recorder.calls[-1][3] == expected(*args)
    unaligned_y = (args[0], Tensor(BASE + 0x201), *args[2:])  # y has no alignment rule: it is packed
    launcher(*unaligned_y)
    assert recorder.calls[-1][3] == expected(*unaligned_y)


def test_the_stream_is_queried_on_every_launch_with_the_memo(configured, torch_streams):  # noqa: F811
    _, recorder, launcher, pack = configured
    launcher(*good_args())
    torch_streams[0] = 0xAB8
    launcher(*good_args())
    assert pack.calls == 1 and [c[2] for c in recorder.calls] == [0xAB0, 0xAB8]


def test_a_tensor_on_another_device_after_a_memo_takes_launchs_path(configured):
    kernel, recorder, launcher, pack = configured
    launcher(*good_args())
    launcher(*good_args(dev=1))  # same addresses, other device: never the memo
    assert recorder.calls[-1][0] == "fn1" and recorder.calls[-1][2] == 0xCD0
    assert recorder.calls[-1][4] == kernel._state().packer.kernel_params
    launcher(*good_args())
    assert pack.calls == 1 and recorder.calls[-1][0] == "fn0"


@pytest.mark.parametrize("ptx", [".visible .entry k(.param .u64 .ptr.align 16 x) { ret; }",
                                 ".visible .entry k(.param .u64 x) { ret; }"])
def test_a_one_parameter_signature_remembers_its_value(torch_streams, monkeypatch, ptx):  # noqa: F811
    kernel, recorder = fake_kernel(ptx, monkeypatch=monkeypatch)
    launcher = kernel.configure(1, 32)
    x, other = Tensor(BASE + 0x100), Tensor(BASE + 0x200)
    for t in (x, x, other, x):
        launcher(t)
    assert [c[3] for c in recorder.calls] == [t.data_ptr().to_bytes(8, "little") for t in (x, x, other, x)]
    assert {c[4] for c in recorder.calls} == {launcher.__globals__["params"]}   # all through the launcher
