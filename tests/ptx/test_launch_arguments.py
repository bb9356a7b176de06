"""Kernel arguments on the CPU: checking against the signature and the packed parameter buffer."""
import ctypes
import struct
import sys
import types

import numpy as np
import pytest

from layoutkit.ptx import CompiledKernel, Device, DeviceBuffer, LaunchArgumentError, parse_entry
from layoutkit.ptx import arguments
from layoutkit.ptx.arguments import ArgumentPacker

MIXED = """.visible .entry mixed(.param .u8 flag, .param .u64 out, .param .u32 n,
    .param .align 64 .b8 tmap[128], .param .f32 scale, .param .s16 delta, .param .f64 eps,
    .param .u64 .ptr.global.align 16 aligned, .param .b32 bits, .param .align 4 .b8 blob[12]) { ret; }"""
BASE = 0x7F12_3456_0000


class FakeTensorMap:
    """Stands for a TensorMap: 128 packed bytes, a device, an encoding with an address."""

    def __init__(self, device=0):
        self.packed = bytes(range(128))
        self.device = device
        self.encoding = types.SimpleNamespace(global_address=BASE)


def buffer(ptr=BASE, ordinal=0, shape=(16,), dtype=np.float32):
    return DeviceBuffer(ptr, shape, dtype, Device(ordinal, None, None), owner=False)


def mixed_args(**changes):
    args = dict(flag=7, out=buffer(BASE + 0x100), n=4_000_000_000, tmap=FakeTensorMap(), scale=1.5,
                delta=-3, eps=2.0 ** -30, aligned=buffer(BASE + 0x200), bits=-1, blob=b"abcdefghijkl")
    args.update(changes)
    return list(args.values())


def test_packed_bytes_of_a_mixed_signature():
    packer = ArgumentPacker(parse_entry(MIXED))
    packer.pack(mixed_args())
    assert packer.offsets == (0, 8, 16, 64, 192, 196, 200, 208, 216, 220)
    expected = bytearray(packer.size)
    expected[0] = 7
    expected[8:16] = (BASE + 0x100).to_bytes(8, "little")
    expected[16:20] = (4_000_000_000).to_bytes(4, "little")
    expected[64:192] = bytes(range(128))
    expected[192:196] = struct.pack("<f", 1.5)
    expected[196:198] = (-3).to_bytes(2, "little", signed=True)
    expected[200:208] = struct.pack("<d", 2.0 ** -30)
    expected[208:216] = (BASE + 0x200).to_bytes(8, "little")
    expected[216:220] = b"\xff\xff\xff\xff"
    expected[220:232] = b"abcdefghijkl"
    assert packer.size == 232 and packer.packed_bytes() == bytes(expected)
    assert packer.device == 0 and not packer.saw_torch and packer.unknown_device == []


def test_kernel_params_array_points_at_each_parameter():
    packer = ArgumentPacker(parse_entry(MIXED))
    packer.pack(mixed_args())
    pointers = (ctypes.c_void_p * 10).from_address(packer.kernel_params)
    assert pointers[3] % 64 == 0  # the tensor map's copy is 64-byte aligned
    assert ctypes.string_at(pointers[3], 128) == bytes(range(128))
    assert ctypes.c_uint32.from_address(pointers[2]).value == 4_000_000_000
    assert ctypes.c_float.from_address(pointers[4]).value == 1.5
    packer.pack(mixed_args(n=5, scale=-2.0))  # in place: same addresses, new values
    assert ctypes.c_uint32.from_address(pointers[2]).value == 5
    assert ctypes.c_float.from_address(pointers[4]).value == -2.0


def test_no_parameters():
    packer = ArgumentPacker(parse_entry(".visible .entry k() { ret; }"))
    packer.pack(())
    assert packer.kernel_params == 0 and packer.packed_bytes() == b""


@pytest.mark.parametrize("changes, message", [
    (dict(flag=256), r"'flag' \(.param .u8 flag\): got 256; this parameter holds integers in 0..255"),
    (dict(flag=-1), r"'flag'.*got -1; this parameter holds integers in 0..255"),
    (dict(n=2 ** 32), r"'n'.*got 4294967296; this parameter holds integers in 0..4294967295"),
    (dict(delta=40000), r"'delta'.*got 40000; this parameter holds integers in -32768..32767"),
    (dict(bits=2 ** 32), r"'bits'.*holds integers in -2147483648..4294967295"),
    (dict(n=3.0), r"'n' \(.param .u32 n\): got 3.0; this parameter \(.u32\) takes an int"),
    (dict(n=buffer()), r"'n'.*got a DeviceBuffer; this parameter \(.u32\) takes an int"),
    (dict(scale="1.5"), r"'scale'.*got '1.5'; this parameter \(.f32\) takes a float"),
    (dict(scale=1e39), r"'scale'.*the value overflows .f32 \(largest finite 3.40282e\+38\)"),
    (dict(scale=buffer()), r"'scale'.*takes a float"),
    (dict(out=2 ** 64), r"'out'.*holds integers in 0..18446744073709551615"),
    (dict(out=np.zeros(4)), r"'out'.*got a ndarray; this parameter takes an int or a device pointer: a ndarray "
                            r"whose __dlpack_device__\(\) is \(1, 0\) is not device memory"),
    (dict(out=1.5), r"'out'.*takes an int or a device pointer: a float is not device memory"),
    (dict(aligned=12345), r"'aligned' \(.param .u64 .ptr.align 16 aligned\): got 12345; this parameter takes a "
                          r"device pointer"),
    (dict(aligned=buffer(BASE + 8)), r"'aligned'.*the address 0x7f1234560008 must be 16-byte aligned \(it is 8 "
                                     r"bytes past a multiple of 16\)"),
    (dict(tmap=b"x" * 128), r"'tmap'.*this parameter takes a TensorMap"),
    (dict(blob=b"short"), r"'blob'.*takes exactly 12 bytes, not 5"),
    (dict(blob=3), r"'blob'.*takes a bytes-like object of 12 bytes"),
])
def test_argument_errors_name_parameter_value_and_rule(changes, message):
    packer = ArgumentPacker(parse_entry(MIXED))
    with pytest.raises(LaunchArgumentError, match=r"kernel 'mixed', parameter " + message):
        packer.pack(mixed_args(**changes))


def test_argument_count():
    packer = ArgumentPacker(parse_entry(MIXED))
    with pytest.raises(LaunchArgumentError, match=r"takes 10 arguments \(flag, out, n, tmap, .*\) but 9 were given"):
        packer.pack(mixed_args()[:-1])


def test_numpy_scalars_bools_and_bit_patterns():
    packer = ArgumentPacker(parse_entry(MIXED))
    packer.pack(mixed_args(flag=np.uint8(3), n=True, scale=np.float32(0.25), out=np.int64(64), bits=0xFFFF_FFFF))
    raw = packer.packed_bytes()
    assert raw[0] == 3 and raw[16:20] == b"\x01\0\0\0" and raw[192:196] == struct.pack("<f", 0.25)
    assert raw[8:16] == (64).to_bytes(8, "little") and raw[216:220] == b"\xff\xff\xff\xff"


def test_arguments_on_two_devices_are_refused():
    packer = ArgumentPacker(parse_entry(MIXED))
    with pytest.raises(LaunchArgumentError, match="parameter 'aligned' is on CUDA device 1 but parameter 'out' is on "
                                                  "device 0"):
        packer.pack(mixed_args(aligned=buffer(BASE + 0x200, ordinal=1)))
    with pytest.raises(LaunchArgumentError, match="parameter 'tmap' is on CUDA device 1 but parameter 'out'"):
        packer.pack(mixed_args(tmap=FakeTensorMap(device=1)))


def test_freed_buffers_are_refused():
    buf = DeviceBuffer(BASE, (4,), np.float32, Device(0, None, None), owner=True)
    buf._finalizer.detach()  # nothing to free for real: mark it freed by hand
    buf._finalizer = types.SimpleNamespace(alive=False)
    with pytest.raises(LaunchArgumentError, match="was freed"):
        ArgumentPacker(parse_entry(MIXED)).pack(mixed_args(out=buf))


class ArrayInterfaceOnly:
    def __init__(self, ptr):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (4,), "typestr": "<f4", "version": 3}


class FakeCudaDLPack:
    """A DLPack producer that claims device (CUDA, 0) and exports a numpy array's memory."""

    def __init__(self, array):
        self.array = array

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__()


def test_array_interface_and_dlpack_pointers():
    packer = ArgumentPacker(parse_entry(MIXED))
    packer.pack(mixed_args(out=ArrayInterfaceOnly(BASE + 0x400)))
    assert packer.packed_bytes()[8:16] == (BASE + 0x400).to_bytes(8, "little")
    assert [(s.name, a) for s, a in packer.unknown_device] == [("out", BASE + 0x400)]
    host = np.arange(64, dtype=np.float32)[16:]  # a byte offset inside the allocation
    packer.pack(mixed_args(aligned=FakeCudaDLPack(host)))
    assert packer.packed_bytes()[208:216] == host.ctypes.data.to_bytes(8, "little")


def test_torch_tensors_are_read_through_the_fast_path(monkeypatch):
    class Tensor:  # stands for torch.Tensor: data_ptr() and get_device() are what the packer reads
        def __init__(self, ptr, dev):
            self.ptr, self.dev, self.device = ptr, dev, f"cuda:{dev}" if dev >= 0 else "cpu"

        def data_ptr(self):
            return self.ptr

        def get_device(self):
            return self.dev

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(Tensor=Tensor))
    monkeypatch.setattr(arguments, "_torch_tensor", None)
    packer = ArgumentPacker(parse_entry(MIXED))
    packer.pack(mixed_args(out=Tensor(BASE + 0x800, 0), aligned=Tensor(BASE + 0x900, 0)))
    raw = packer.packed_bytes()
    assert raw[8:16] == (BASE + 0x800).to_bytes(8, "little") and packer.saw_torch and packer.device == 0
    with pytest.raises(LaunchArgumentError, match="'aligned'.*the torch tensor is on cpu, not on a CUDA device"):
        packer.pack(mixed_args(aligned=Tensor(BASE, -1)))
    with pytest.raises(LaunchArgumentError, match="'aligned' is on CUDA device 1 but parameter 'out' is on device 0"):
        packer.pack(mixed_args(out=Tensor(BASE, 0), aligned=Tensor(BASE, 1)))
    with pytest.raises(LaunchArgumentError, match="'aligned'.*must be 16-byte aligned"):
        packer.pack(mixed_args(aligned=Tensor(BASE + 2, 0)))


def test_compiled_kernel_pack_and_repr():
    kernel = CompiledKernel(b"\x7fELF", signature=parse_entry(MIXED))
    assert kernel.pack(*mixed_args())[:1] == b"\x07"
    assert repr(kernel).startswith("CompiledKernel(mixed(.u8 flag, .u64 out, .u32 n, .align 64 .b8 tmap[128]")


def test_the_generated_fast_path_agrees_with_the_checked_path(monkeypatch):
    class Tensor:
        def __init__(self, ptr, dev):
            self.ptr, self.dev = ptr, dev

        def data_ptr(self):
            return self.ptr

        def get_device(self):
            return self.dev

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(Tensor=Tensor))
    monkeypatch.setattr(arguments, "_torch_tensor", None)
    sig = parse_entry(".entry k(.param .u64 .ptr.align 16 x, .param .u64 y, .param .u32 n, .param .s8 s,"
                      " .param .f32 f, .param .align 64 .b8 t[128]) { ret; }")
    fast, checked = ArgumentPacker(sig), ArgumentPacker(sig)
    args = (Tensor(BASE, 0), Tensor(BASE + 4, 0), 7, -5, 0.5, FakeTensorMap())
    assert fast.fast_pack(args) == 0  # taken, and says the device
    checked.pack_checked(args)
    assert fast.packed_bytes() == checked.packed_bytes()
    for doubtful in [(Tensor(BASE + 4, 0),) + args[1:],           # misaligned: the checked path words it
                     args[:1] + (Tensor(BASE, 1),) + args[2:],     # two devices
                     args[:2] + (2 ** 32,) + args[3:],             # out of .u32 range (struct refuses)
                     args[:2] + (np.int32(7),) + args[3:],         # not an exact int
                     args[:4] + (1,) + args[5:],                   # an int for a float
                     args[:5] + (FakeTensorMap(device=1),),        # tensor map on another device
                     args[:5]]:                                    # too few
        with pytest.raises(arguments.FAST_PATH_MISSES):
            fast.fast_pack(doubtful)


def test_packing_from_many_threads_keeps_each_threads_arguments():
    import threading
    kernel = CompiledKernel(b"", signature=parse_entry(".entry k(.param .u32 n) { ret; }"))
    seen, errors = {}, []
    together = threading.Barrier(8)  # all threads alive at once, so no thread id is reused

    def work(n):
        try:
            together.wait()
            for _ in range(200):
                got = kernel.pack(n)
                if got != n.to_bytes(4, "little"):
                    errors.append((n, got))
            seen[n] = kernel._state().packer.kernel_params
            together.wait()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(seen.values())) == 8  # one parameter buffer per thread
