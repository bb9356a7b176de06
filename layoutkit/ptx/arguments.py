"""Kernel arguments: checking Python values against a signature and packing them into the
parameter buffer handed to ``cuLaunchKernel``.

An :class:`ArgumentPacker` is built once per signature (and thread): one ctypes buffer holding every
parameter at its offset (each aligned as the PTX declares it; tensor maps 64-byte aligned) and the
array of pointers into it that the driver reads (``kernelParams``). Each launch overwrites the
buffer in place with one ``struct.pack_into``: through a function generated for the signature
when the arguments are the common case (layoutkit.ptx.fastpath), else through per-kind checks.

Device pointers come from torch tensors (read without importing torch: only if the caller already
did), :class:`~layoutkit.ptx.memory.DeviceBuffer`, ``__cuda_array_interface__`` or ``__dlpack__``.
"""
from __future__ import annotations

import ctypes
import numbers
import struct
import sys
from typing import NamedTuple

from .fastpath import FAST_PATH_MISSES, build_fast_pack
from .signature import EntrySignature, ParamKind, ParamSpec

__all__ = ["ArgumentPacker", "DLPackArray", "FAST_PATH_MISSES", "LaunchArgumentError", "device_address",
           "dlpack_array"]


class LaunchArgumentError(ValueError):
    """A kernel argument does not fit its parameter: names the parameter, the value and the rule."""


_torch_tensor = None


def torch_tensor_type():
    """``torch.Tensor`` if the program has imported torch, else None (torch is never imported here)."""
    global _torch_tensor
    if _torch_tensor is None:
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "Tensor"):
            _torch_tensor = torch.Tensor
    return _torch_tensor


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", ctypes.c_uint32), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


_DLPACK_CUDA, _DLPACK_CUDA_MANAGED = 2, 13
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class DLPackArray(NamedTuple):
    """What a legacy DLPack capsule says of an array: address of its first element, DLPack
    device (type, id), shape, strides in elements (None: compact row-major) and dtype (DLPack
    type code, bits, lanes; codes 0 int, 1 uint, 2 float, 4 bfloat)."""

    address: int
    device: tuple[int, int]
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    dtype: tuple[int, int, int]


def dlpack_array(value) -> DLPackArray:
    """Read ``value.__dlpack__()`` (a legacy "dltensor" capsule, left unconsumed: its deleter runs
    when it is dropped) without importing the library that made it.

    >>> import numpy as np
    >>> a = dlpack_array(np.zeros((3, 4), np.float32)[:, 1:])
    >>> a.device, a.shape, a.strides, a.dtype
    ((1, 0), (3, 3), (4, 1), (2, 32, 1))
    """
    capsule = value.__dlpack__()
    tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    ndim = tensor.ndim
    shape = tuple((ctypes.c_int64 * ndim).from_address(tensor.shape)) if ndim else ()
    strides = tuple((ctypes.c_int64 * ndim).from_address(tensor.strides))\
        if ndim and tensor.strides else None
    code = tensor.dtype
    return DLPackArray((tensor.data or 0) + tensor.byte_offset,
                       (tensor.device.device_type, tensor.device.device_id), shape, strides,
                       (code & 0xFF, (code >> 8) & 0xFF, code >> 16))


def _dlpack_pointer(value) -> tuple[int, int]:
    dev_type, dev_id = value.__dlpack_device__()
    if dev_type not in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED):
        raise TypeError(f"a {type(value).__name__} whose __dlpack_device__() is ({dev_type}, {dev_id}) is not "
                        f"device memory (CUDA memory has DLPack device type {_DLPACK_CUDA})")
    capsule = value.__dlpack__()
    # A legacy "dltensor" capsule points at a DLManagedTensor whose first member is the DLTensor.
    tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    return (tensor.data or 0) + tensor.byte_offset, int(dev_id)


def device_address(value) -> tuple[int, int | None]:
    """(address, device ordinal or None when the object does not say) of device memory: a CUDA torch
    tensor, a :class:`~layoutkit.ptx.DeviceBuffer`, or an object with ``__cuda_array_interface__``
    or a CUDA ``__dlpack__``; the address of its first element, in bytes.

    Raises TypeError for what is not device memory (numpy arrays, CPU tensors, ...) and ValueError
    for a freed DeviceBuffer. Torch is never imported here: a tensor is recognised only if the
    program imported torch.

    >>> from layoutkit.ptx import Device, DeviceBuffer
    >>> buf = DeviceBuffer(0x7F0000001000, (4,), "float32", Device(1, None, None), owner=False)
    >>> hex(device_address(buf)[0]), device_address(buf)[1]
    ('0x7f0000001000', 1)
    >>> import numpy as np
    >>> device_address(np.zeros(4))
    Traceback (most recent call last):
    ...
    TypeError: a ndarray whose __dlpack_device__() is (1, 0) is not device memory (CUDA memory has DLPack device type 2)
    """
    tensor_type = torch_tensor_type()
    if tensor_type is not None and isinstance(value, tensor_type):
        dev = value.get_device()
        if dev < 0:
            raise TypeError(f"it is a torch tensor on {value.device}, not on a CUDA device")
        return value.data_ptr(), dev
    buffer_device = getattr(value, "device", None)
    if hasattr(value, "ptr") and hasattr(buffer_device, "ordinal"):  # DeviceBuffer
        value._live()
        return value.ptr, buffer_device.ordinal
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0]), None
    if hasattr(value, "__dlpack_device__") and hasattr(value, "__dlpack__"):
        return _dlpack_pointer(value)
    raise TypeError(f"a {type(value).__name__} is not device memory (give a CUDA torch tensor, a "
                    "DeviceBuffer, or an object with __cuda_array_interface__ or __dlpack__)")


# PTX type -> (struct code, low, high, mask applied before packing or None)
def _int_rule(ptx_type: str) -> tuple[str, int, int, int | None]:
    bits = int(ptx_type[1:])
    unsigned_code = {8: "B", 16: "H", 32: "I", 64: "Q"}[bits]
    if ptx_type[0] == "u":
        return unsigned_code, 0, 2 ** bits - 1, None
    if ptx_type[0] == "s":
        return unsigned_code.lower(), -2 ** (bits - 1), 2 ** (bits - 1) - 1, None
    return unsigned_code, -2 ** (bits - 1), 2 ** bits - 1, 2 ** bits - 1  # .bN: either reading of the bits


_FLOAT_RULES = {"f16": ("e", 65504.0), "f32": ("f", 3.4028234663852886e38), "f64": ("d", float("inf"))}


def _range_text(low: int, high: int) -> str:
    return f"{low}..{high}"


class ArgumentPacker:
    """Checks arguments against ``signature`` and packs them into one reusable parameter buffer."""

    def __init__(self, signature: EntrySignature):
        self.signature = signature
        self.params: tuple[ParamSpec, ...] = signature.params
        fmt, offsets, offset = ["<"], [], 0
        for p in self.params:
            pad = -offset % p.align
            if pad:
                fmt.append(f"{pad}x")
            offset += pad
            offsets.append(offset)
            if p.is_array:
                fmt.append(f"{p.size}s")
            elif p.kind is ParamKind.FLOAT:
                fmt.append(_FLOAT_RULES[p.ptx_type][0])
            else:
                fmt.append(_int_rule(p.ptx_type)[0])
            offset += p.size
        self.offsets = tuple(offsets)
        self.size = offset
        self._struct = struct.Struct("".join(fmt))
        self._storage = (ctypes.c_char * (self.size + 64))()
        self._base = -ctypes.addressof(self._storage) % 64  # tensor maps need 64-byte alignment
        start = ctypes.addressof(self._storage) + self._base
        self._pointers = (ctypes.c_void_p * max(len(self.params), 1))(*[start + o for o in self.offsets])
        self.kernel_params = ctypes.addressof(self._pointers) if self.params else 0
        self._converters = tuple(self._converter(p) for p in self.params)
        self._values = [None] * len(self.params)
        self.has_pointers = any(p.kind in (ParamKind.POINTER, ParamKind.INT_OR_POINTER) for p in self.params)
        self._build_fast_pack()
        # set by pack(): the device ordinal the arguments live on (None if none says), whether a torch
        # tensor was among them, and the pointers whose device is unknown (checked by the launcher).
        self.device: int | None = None
        self.saw_torch = False
        self.unknown_device: list[tuple[ParamSpec, int]] = []
        self._device_param: ParamSpec | None = None

    def packed_bytes(self) -> bytes:
        """The parameter buffer as last packed (``size`` bytes, parameters at ``offsets``)."""
        return bytes(self._storage[self._base:self._base + self.size])

    def pack(self, args) -> None:
        """Check ``args`` against the signature and write them into the parameter buffer.

        Sets ``device`` (the arguments' device ordinal, None if none says), ``saw_torch`` and
        ``unknown_device`` (pointers whose device the launcher must ask the driver for).
        """
        try:
            device = self.fast_pack(args)
        except FAST_PATH_MISSES:
            self.pack_checked(args)
            return
        self.device = device
        self.saw_torch = self.has_pointers
        if self.unknown_device:
            self.unknown_device = []

    def _build_fast_pack(self) -> None:
        self._fast_tensor_type = torch_tensor_type()
        self.fast_pack, self.fast_source = build_fast_pack(self, self._fast_tensor_type)

    def pack_checked(self, args) -> None:
        """:meth:`pack` without the fast path: every argument through its kind's checks."""
        if self._fast_tensor_type is None and torch_tensor_type() is not None:
            self._build_fast_pack()  # torch was imported since: let its tensors take the fast path
        self._pack_checked(args)

    def _pack_checked(self, args) -> None:
        if len(args) != len(self.params):
            names = ", ".join(p.name for p in self.params)
            raise LaunchArgumentError(f"kernel {self.signature.name!r} takes {len(self.params)} arguments "
                                      f"({names}) but {len(args)} were given")
        self.device = None
        self.saw_torch = False
        if self.unknown_device:
            self.unknown_device = []
        values = self._values
        for i, convert in enumerate(self._converters):
            values[i] = convert(args[i])
        self._struct.pack_into(self._storage, self._base, *values)

    # -- per-kind converters: value -> what struct packs; raise LaunchArgumentError on a mismatch --

    def _fail(self, spec: ParamSpec, value, rule: str):
        shown = repr(value) if isinstance(value, (int, float, str, bytes)) else f"a {type(value).__name__}"
        raise LaunchArgumentError(f"kernel {self.signature.name!r}, parameter {spec.name!r} "
                                  f"({spec.describe()}): got {shown[:80]}; {rule}")

    def _note_device(self, spec: ParamSpec, dev: int | None, address: int) -> None:
        if dev is None:
            self.unknown_device.append((spec, address))
        elif self.device is None:
            self.device, self._device_param = dev, spec
        elif dev != self.device:
            raise LaunchArgumentError(
                f"kernel {self.signature.name!r}: parameter {spec.name!r} is on CUDA device {dev} but "
                f"parameter {self._device_param.name!r} is on device {self.device}; all arguments of "
                "one launch must live on the device it runs on")

    def _converter(self, spec: ParamSpec):
        kind = spec.kind
        if kind is ParamKind.FLOAT:
            limit = _FLOAT_RULES[spec.ptx_type][1]

            def convert_float(value):
                if type(value) is float:
                    x = value
                elif isinstance(value, numbers.Real) and not isinstance(value, bool):
                    x = float(value)
                else:
                    self._fail(spec, value, f"this parameter (.{spec.ptx_type}) takes a float")
                if limit < abs(x) < float("inf"):
                    self._fail(spec, value, f"the value overflows .{spec.ptx_type} (largest finite {limit:g})")
                return x
            return convert_float
        if kind is ParamKind.INT:
            code, low, high, mask = _int_rule(spec.ptx_type)

            def convert_int(value):
                if type(value) is not int:
                    value = self._as_int(spec, value)
                if not low <= value <= high:
                    self._fail(spec, value, f"this parameter holds integers in {_range_text(low, high)}")
                return value & mask if mask is not None else value
            return convert_int
        if kind in (ParamKind.POINTER, ParamKind.INT_OR_POINTER):
            code, low, high, mask = _int_rule(spec.ptx_type)
            align = spec.pointer_align
            takes_int = kind is ParamKind.INT_OR_POINTER

            def convert_pointer(value):
                tensor_type = _torch_tensor or torch_tensor_type()
                if tensor_type is not None and type(value) is tensor_type:  # fast path
                    dev = value.get_device()
                    if dev < 0:
                        self._fail(spec, value, f"the torch tensor is on {value.device}, not on a CUDA device")
                    address = value.data_ptr()
                    self.saw_torch = True
                    if dev != self.device:
                        self._note_device(spec, dev, address)
                elif takes_int and type(value) is int:
                    if not low <= value <= high:
                        self._fail(spec, value, f"this parameter holds integers in {_range_text(low, high)}")
                    return value & mask if mask is not None else value
                else:
                    if takes_int and isinstance(value, numbers.Integral):  # numpy ints, bool
                        return convert_pointer(int(value))
                    try:
                        address, dev = device_address(value)
                    except (TypeError, ValueError) as exc:  # not device memory, or a freed DeviceBuffer
                        expected = "an int or a device pointer" if takes_int else "a device pointer"
                        self._fail(spec, value, f"this parameter takes {expected}: {exc}")
                    if tensor_type is not None and isinstance(value, tensor_type):
                        self.saw_torch = True
                    self._note_device(spec, dev, address)
                if address % align:
                    self._fail(spec, value, f"the address 0x{address:x} must be {align}-byte aligned "
                                            f"(it is {address % align} bytes past a multiple of {align})")
                return address
            return convert_pointer
        if kind is ParamKind.TENSORMAP:
            def convert_tensormap(value):
                packed = getattr(value, "packed", None)
                if packed is None:
                    if not hasattr(value, "getPtr"):
                        self._fail(spec, value, "this parameter takes a TensorMap")
                    packed = ctypes.string_at(value.getPtr(), spec.size)  # a raw cuda-python CUtensorMap
                dev = getattr(value, "device", None)
                if dev is not None:
                    self._note_device(spec, dev, value.encoding.global_address)
                return packed
            return convert_tensormap

        def convert_bytes(value):
            try:
                data = bytes(memoryview(value))
            except TypeError:
                self._fail(spec, value, f"this parameter takes a bytes-like object of {spec.size} bytes")
            if len(data) != spec.size:
                self._fail(spec, value, f"this parameter takes exactly {spec.size} bytes, not {len(data)}")
            return data
        return convert_bytes

    def _as_int(self, spec: ParamSpec, value) -> int:
        if isinstance(value, numbers.Integral):  # bool, numpy integers
            return int(value)
        self._fail(spec, value, f"this parameter (.{spec.ptx_type}) takes an int")
