"""Tensor arguments: what a `Tensor[dtype, rank]` parameter reads from the object it is given,
and the facts of it that specialize the kernel.

A tensor argument is a torch tensor, an object with `__cuda_array_interface__` (CuPy, Numba,
layoutkit.ptx.DeviceBuffer) or `__dlpack__`, a numpy array (the CPU interpreter's memory; also
enough to print PTX), or a `TensorSpec` (the facts alone, for introspection). From it the
parameter takes the address of its first element, its extents and its strides in elements; the
kernel receives them as one pointer and 2 * rank integer parameters.

The specialization key of a tensor argument (`tensor_fact`), one entry per fact:

    aligned   the address is a multiple of 16 bytes (else only of the element size)
    narrow    every extent, every stride and the largest element offset sum((n_i - 1) * s_i)
              is below 2^31: the extents and strides are 32-bit parameters (else 64-bit, and
              index arithmetic over them is 64-bit)
    extents   per mode '16' (a multiple of 16) or '+' (any other positive extent)
    strides   per mode '1' (the constant 1 in the kernel's layout: a contiguous mode, so vector
              accesses and TMA see it), '0' (the constant 0: a broadcast mode), '16' (a positive
              multiple of 16 bytes, declared to the prover as a multiple of 16 / element bytes
              elements) or '+' (any other positive stride)

Never part of the key: the values of extents and strides (an extent of 1 stays a symbol), the
address itself, the device. Refused with a KernelArgumentError naming the parameter, the value
and the rule: a rank or dtype other than the annotation's, an address that is not a multiple of
the element size, an extent of 0 (a Tensor's extents are positive: launch nothing instead) and a
negative stride. A launch (not the interpreter, not `.ptx()`) also refuses host memory.

>>> from layoutkit.dsl.core.arguments import parameter
>>> from layoutkit.dsl.core.types import Tensor, bf16
>>> p = parameter("q", Tensor[bf16, 2])
>>> tensor_fact(p, TensorSpec(bf16, (4096, 128)))
(True, True, '16', '16', '16', '1')
>>> tensor_fact(p, TensorSpec(bf16, (1000, 60), strides=(64, 1)))
(True, True, '+', '+', '16', '1')
>>> try:
...     tensor_fact(p, TensorSpec(bf16, (8, 8, 8)))
... except KernelArgumentError as exc:
...     print(exc.message)
argument q: a tensor of rank 3 (shape (8, 8, 8)) given for q: Tensor[bf16, 2]; its rank must be 2
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import NamedTuple

from layoutkit.ptx import dlpack_array

from .errors import KernelArgumentError
from .types import DType, HOST_NAMES

__all__ = ["TensorSpec", "TensorView", "tensor_view", "tensor_fact", "field_reader",
           "runtime_fields", "runtime_values", "host_tensor_error", "NARROW_LIMIT",
           "STRIDE_BYTES"]

NARROW_LIMIT = 1 << 31     # extents, strides and offsets below this are 32-bit parameters
STRIDE_BYTES = 16          # the stride divisibility that specializes (TMA's and a 16-byte vector's)
_DLPACK_CUDA = (2, 13)     # kDLCUDA, kDLCUDAManaged
_DLPACK_CODES = {(0, 32): "int32", (0, 64): "int64", (1, 32): "uint32", (2, 16): "float16",
                 (2, 32): "float32", (2, 64): "float64", (4, 16): "bfloat16"}
_TYPESTR = {"<i4": "int32", "<i8": "int64", "<u4": "uint32", "<f2": "float16", "<f4": "float32",
            "<f8": "float64"}


@dataclass(frozen=True)
class TensorSpec:
    """The facts of a tensor without its memory: specializes a kernel and prints its PTX with no
    GPU and no array (`kernel.ptx(lk.TensorSpec(lk.bf16, (4, 4096, 16, 128)), ...)`); it cannot
    be launched. `strides` in elements (default: row-major, the last mode contiguous);
    `aligned`: whether the address counts as a multiple of 16 bytes."""

    dtype: DType
    shape: tuple
    strides: tuple | None = None
    aligned: bool = True

    def __post_init__(self):
        shape = tuple(self.shape)
        if self.strides is None:
            strides, run = [], 1
            for n in reversed(shape):
                strides.insert(0, run)
                run *= max(n, 1)
            object.__setattr__(self, "strides", tuple(strides))
        object.__setattr__(self, "shape", shape)
        if len(self.strides) != len(shape):
            raise ValueError(f"TensorSpec: {len(self.strides)} strides {self.strides} for "
                             f"{len(shape)} extents {shape}")

    def stride(self, mode: int | None = None):
        """The strides (torch's spelling), or one mode's."""
        return self.strides if mode is None else self.strides[mode]


class TensorView(NamedTuple):
    """What a tensor argument says: `address` of element 0, `shape`, `strides` (elements),
    `dtype` (None when the object names no kernel element type, e.g. numpy uint16 bf16 bits),
    `itemsize` (bytes), `memory` ('cuda', 'host' or 'none' for a TensorSpec) and `device`
    (as the object says it, for messages)."""

    address: int
    shape: tuple
    strides: tuple
    dtype: DType | None
    itemsize: int
    memory: str
    device: str


def _torch_tensor_type():
    torch = sys.modules.get("torch")       # never imported here: only if the program did
    tensor = getattr(torch, "Tensor", None)
    return tensor if isinstance(tensor, type) else None


def _contiguous_strides(shape) -> tuple:
    strides, run = [], 1
    for n in reversed(shape):
        strides.insert(0, run)
        run *= max(n, 1)
    return tuple(strides)


def _from_interface(value, iface: dict, memory: str) -> TensorView:
    """The view of an array-interface dict (numpy's, or CUDA's version 2/3)."""
    shape = tuple(int(n) for n in iface["shape"])
    typestr = iface["typestr"]
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 0
    raw = iface.get("strides")
    if raw is None:                      # C-contiguous
        strides = _contiguous_strides(shape)
    else:
        if itemsize == 0 or any(int(s) % itemsize for s in raw):
            raise TypeError(f"its byte strides {tuple(raw)} are not multiples of its "
                            f"{itemsize}-byte elements")
        strides = tuple(int(s) // itemsize for s in raw)
    dtype = HOST_NAMES.get(str(getattr(value, "dtype", ""))) or \
        HOST_NAMES.get(_TYPESTR.get(typestr, ""))
    return TensorView(int(iface["data"][0]), shape, strides, dtype, itemsize, memory,
                      "cuda" if memory == "cuda" else "cpu")


_TORCH_DTYPES: dict = {}


def _torch_dtype(dtype) -> DType | None:
    """The kernel element type of a torch dtype (None for one no kernel type names), kept."""
    try:
        return _TORCH_DTYPES[dtype]
    except KeyError:
        found = _TORCH_DTYPES[dtype] = HOST_NAMES.get(str(dtype).removeprefix("torch."))
        return found


def tensor_view(value) -> TensorView | None:
    """The TensorView of `value`, or None when it is no tensor (see the module docstring).
    Raises TypeError for a tensor that cannot be read as one (byte strides that are not whole
    elements)."""
    torch_tensor = _torch_tensor_type()
    if torch_tensor is not None and isinstance(value, torch_tensor):
        dtype = _torch_dtype(value.dtype)
        return TensorView(value.data_ptr(), tuple(value.shape), value.stride(), dtype,
                          0 if dtype is None else dtype.nbytes,   # 0: torch's own dtype is wrong
                          "cuda" if value.is_cuda else "host", "")   # device: in messages only
    if isinstance(value, TensorSpec):
        address = 0 if value.aligned else value.dtype.nbytes
        return TensorView(address, value.shape, value.strides, value.dtype, value.dtype.nbytes,
                          "none", "none")
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_interface(value, cai, "cuda")
    if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__") and \
            getattr(value, "__array_interface__", None) is None:
        a = dlpack_array(value)
        name = _DLPACK_CODES.get(a.dtype[:2]) if a.dtype[2] == 1 else None
        strides = a.strides if a.strides is not None else _contiguous_strides(a.shape)
        cuda = a.device[0] in _DLPACK_CUDA
        return TensorView(a.address, a.shape, tuple(strides), HOST_NAMES.get(name) if name
                          else None, a.dtype[1] * a.dtype[2] // 8, "cuda" if cuda else "host",
                          f"cuda:{a.device[1]}" if cuda else f"DLPack device {a.device}")
    iface = getattr(value, "__array_interface__", None)
    if iface is not None:
        return _from_interface(value, iface, "host")
    return None


def _fail(p, message: str) -> KernelArgumentError:
    return KernelArgumentError(f"argument {p.name}: {message}")


def read_tensor(p, value) -> TensorView:
    """The TensorView of argument `value` for tensor parameter `p`, its rank, dtype and address
    checked (see the module docstring)."""
    try:
        view = tensor_view(value)
    except TypeError as exc:
        raise _fail(p, f"{type(value).__name__} {exc}; a Tensor's strides count whole "
                       f"elements") from None
    want = p.annotation
    if view is None:
        raise _fail(p, f"{value!r} is not a tensor (a torch tensor, a DLPack or "
                       f"__cuda_array_interface__ object, a numpy array for the CPU interpreter, "
                       f"or lk.TensorSpec) for {p.describe()}")
    if len(view.shape) != want.rank:
        raise _fail(p, f"a tensor of rank {len(view.shape)} (shape {view.shape}) given for "
                       f"{p.describe()}; its rank must be {want.rank}")
    if (view.dtype is not None and view.dtype is not want.dtype and view.dtype != want.dtype) \
            or view.itemsize == 0:
        shown = view.dtype or getattr(value, "dtype", "?")
        raise _fail(p, f"a tensor of {shown} given for {p.describe()} (no implicit "
                       "conversion)")
    if view.dtype is None and view.itemsize != want.dtype.nbytes:     # raw bits of the size
        shown = getattr(value, "dtype", f"{view.itemsize}-byte elements")
        raise _fail(p, f"a tensor of {shown} given for {p.describe()} (no implicit conversion; "
                       f"raw bits need {want.dtype.nbytes}-byte elements, e.g. numpy uint16 for "
                       "bf16)")
    e = want.dtype.nbytes
    if view.address % e:
        raise _fail(p, f"its data address {view.address:#x} is not a multiple of {e} bytes: "
                       f"{want.dtype} elements are {e}-byte aligned (a view at an odd byte offset)")
    return view


_FACTS: dict = {}          # (shape, strides, element bytes) -> the key's facts after alignment
MAX_FACTS = 1024


def tensor_fact(p, value) -> tuple:
    """The key entry of tensor argument `value` for parameter `p` (see the module docstring);
    the facts of a (shape, strides) seen before are one dict lookup."""
    view = read_tensor(p, value)
    e = p.annotation.dtype.nbytes
    key = (view.shape, view.strides, e)
    facts = _FACTS.get(key)
    if facts is None:
        facts = _shape_facts(p, view.shape, view.strides, STRIDE_BYTES // e)
        if len(_FACTS) >= MAX_FACTS:
            _FACTS.clear()
        _FACTS[key] = facts
    return (view.address % STRIDE_BYTES == 0, *facts)


def _shape_facts(p, shape: tuple, strides: tuple, unit: int) -> tuple:
    """(narrow, extents' facts..., strides' facts...) of a tensor argument's shape and strides
    (`unit`: the elements in 16 bytes)."""
    extents, facts = [], []
    for mode, n in enumerate(shape):
        if n < 1:
            raise _fail(p, f"mode {mode} of its shape {shape} is {n}; a Tensor's extents "
                           "are positive (launch nothing for an empty tensor)")
        extents.append("+" if n % 16 else "16")
    for mode, s in enumerate(strides):
        if s < 0:
            raise _fail(p, f"mode {mode} of its strides {strides} is {s}; a Tensor's "
                           "strides are non-negative (pass a copy with positive strides)")
        facts.append("1" if s == 1 else "0" if s == 0 else "+" if s % unit else "16")
    span = sum((n - 1) * s for n, s in zip(shape, strides))
    narrow = max((span, *shape, *strides)) < NARROW_LIMIT
    return (narrow, *extents, *facts)


def host_tensor_error(p, value) -> KernelArgumentError | None:
    """The error of launching with `value` for tensor parameter `p` when it is not device
    memory (a CPU tensor, a numpy array, a TensorSpec), else None."""
    torch_tensor = _torch_tensor_type()
    if torch_tensor is not None and isinstance(value, torch_tensor) and value.is_cuda:
        return None
    view = tensor_view(value)
    if view is None or view.memory == "cuda":
        return None
    device = getattr(value, "device", None) if view.device == "" else view.device
    what = "lk.TensorSpec (facts without memory)" if view.memory == "none" else \
        f"a {type(value).__name__} in host memory ({device})"
    return _fail(p, f"{what} given for {p.describe()}; a launch takes device memory (a CUDA "
                    "tensor, DLPack or __cuda_array_interface__ object); the CPU interpreter "
                    "(layoutkit.dsl.interpreter.interpret) runs on numpy arrays")


def runtime_fields(value) -> tuple:
    """The extents then the strides (elements) of a tensor argument, as the kernel's integer
    parameters take them."""
    try:
        return (*value.shape, *value.stride())        # torch tensors, TensorSpec
    except (AttributeError, TypeError):
        view = tensor_view(value)
        return (*view.shape, *view.strides)


def runtime_values(params, runtime: tuple, values: tuple) -> list:
    """The launch values of parameters `runtime` (indices, in order) of `params` for the bound
    arguments `values`, in PTX order: a tensor argument is itself (its pointer: the launcher
    reads the address), then its extents and strides; host memory for a tensor is refused."""
    out = []
    for i in runtime:
        out.append(values[i])
        if params[i].kind == "tensor":
            error = host_tensor_error(params[i], values[i])
            if error is not None:
                raise error
            out += runtime_fields(values[i])
    return out


def field_reader(index: int, field: str, mode: int):
    """A function args -> int reading extent (`field` 'shape') or stride ('stride') `mode` of
    the tensor argument args[index] (torch tensors in two attribute reads)."""
    if field == "shape":
        def read(args):
            value = args[index]
            try:
                return int(value.shape[mode])         # torch, numpy, CuPy, TensorSpec
            except (AttributeError, TypeError, IndexError):
                return _generic(value, 0, mode)
    else:
        def read(args):
            value = args[index]
            try:
                return int(value.stride(mode))
            except (AttributeError, TypeError, IndexError):
                return _generic(value, 1, mode)
    return read


def _generic(value, which: int, mode: int) -> int:
    view = tensor_view(value)
    return int((view.shape, view.strides)[which][mode])
