"""Tiled TMA tensor maps (``cuTensorMapEncodeTiled``), validated in pure Python first.

User-facing shapes, strides and boxes are in **numpy/PyTorch order (outermost first)**, strides in
**elements**; :class:`TiledEncoding` holds the driver's arguments (innermost first, strides in
bytes, enums as ints), so every rule is checked, and testable, without a GPU. In PTX, TMA
coordinates are innermost first: ``{col, row}`` for a row-major ``[rows, cols]`` tensor.

>>> enc = encode_tiled_arguments(0x10000, "bfloat16", shape=(128, 64), strides=(64, 1),
...                              box=(64, 64), swizzle="128B")
>>> enc.global_dims, enc.global_strides, enc.box, enc.swizzle
((64, 128), (128,), (64, 64), 3)
>>> encode_tiled_arguments(0x10000, "bfloat16", shape=(128, 128), strides=(128, 1), box=(64, 128),
...                        swizzle="128B")
Traceback (most recent call last):
...
layoutkit.ptx.tensormap.TensorMapError: box[-1] (innermost) = 128 elements = 256 bytes: with swizzle 128B the inner box must span at most 128 bytes
"""
from __future__ import annotations

import ctypes
import math
import numbers
import operator
from dataclasses import dataclass

import numpy as np

from . import driver
from .isa import smem_swizzle
from .isa.tma import MAX_DIMS
from .signature import TENSORMAP_BYTES

__all__ = ["TensorMap", "TensorMapError", "TiledEncoding", "encode_tiled_arguments"]


class TensorMapError(ValueError):
    """A tensor-map argument breaks a rule of cuTensorMapEncodeTiled; names the field, value and rule."""


# CUtensorMapDataType values (cuda.h, CUDA 13.0) and element sizes in bytes.
_DTYPES = {
    "uint8": (0, 1), "uint16": (1, 2), "uint32": (2, 4), "int32": (3, 4), "uint64": (4, 8),
    "int64": (5, 8), "float16": (6, 2), "float32": (7, 4), "float64": (8, 8), "bfloat16": (9, 2),
    "float32_ftz": (10, 4), "tfloat32": (11, 4), "tfloat32_ftz": (12, 4),
}
# TMA copies bits: types without an enum of their own travel as the unsigned type of their width.
_ALIASES = {
    "int8": "uint8", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8", "e4m3": "uint8", "e5m2": "uint8",
    "int16": "uint16", "half": "float16", "float": "float32", "double": "float64", "bf16": "bfloat16",
    "f16": "float16", "f32": "float32", "f64": "float64", "u8": "uint8", "u16": "uint16",
    "u32": "uint32", "s32": "int32", "u64": "uint64", "s64": "int64", "s8": "uint8", "s16": "uint16",
    "b8": "uint8",
}
_FLOAT_DTYPES = {"float16", "float32", "float64", "bfloat16", "float32_ftz", "tfloat32", "tfloat32_ftz"}

# name -> CUtensorMapSwizzle value; SWIZZLES: name -> (value, span in bytes the inner box must
# fit in; None = no limit), the span that of the hardware pattern (isa.smem_swizzle)
SWIZZLE_ENUMS = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
SWIZZLES = {name: (value, smem_swizzle.span(name) or None) for name, value in SWIZZLE_ENUMS.items()}
L2_PROMOTIONS = {"none": 0, "64B": 1, "128B": 2, "256B": 3}
OOB_FILLS = {"zero": 0, "nan": 1}

MAX_RANK = MAX_DIMS            # a tensor map has as many dimensions as cp.async.bulk.tensor
MAX_DIM = 2 ** 32
MAX_ADDRESS = 2 ** 64 - 1
MAX_STRIDE_BYTES = 2 ** 40
MAX_BOX = 256
MAX_ELEMENT_STRIDE = 8
GLOBAL_ALIGN = 16
STRIDE_MULTIPLE = 16           # bytes: every global stride but the innermost
INNER_BOX_MULTIPLE = 16        # bytes: the innermost box dimension


def canonical_dtype(dtype) -> str:
    """The tensor-map dtype name for a str, numpy dtype or torch dtype (``torch.bfloat16`` -> ``bfloat16``)."""
    if dtype is None or isinstance(dtype, (bool, np.bool_, numbers.Number)):
        raise TensorMapError(f"dtype = {dtype!r}: must be a dtype name (a str), a numpy dtype or a "
                             "torch dtype, not " + ("None" if dtype is None else f"a {type(dtype).__name__}"))
    if isinstance(dtype, str):
        text = dtype
    elif str(dtype).startswith("torch."):
        text = str(dtype).removeprefix("torch.")
    else:
        try:
            text = np.dtype(dtype).name
        except TypeError:
            text = repr(dtype)
    text = _ALIASES.get(text, text)
    if text not in _DTYPES:
        raise TensorMapError(f"dtype = {dtype!r}: not a TMA element type; use one of "
                             f"{sorted(_DTYPES) + sorted(_ALIASES)}")
    return text


@dataclass(frozen=True)
class TiledEncoding:
    """The arguments of cuTensorMapEncodeTiled, in the driver's order and units."""

    dtype: int                       # CUtensorMapDataType
    rank: int
    global_address: int
    global_dims: tuple[int, ...]     # elements, innermost first
    global_strides: tuple[int, ...]  # bytes, dims 1..rank-1, innermost first
    box: tuple[int, ...]             # elements, innermost first
    element_strides: tuple[int, ...]  # innermost first
    interleave: int                  # CUtensorMapInterleave (always NONE here)
    swizzle: int                     # CUtensorMapSwizzle
    l2_promotion: int                # CUtensorMapL2promotion
    oob_fill: int                    # CUtensorMapFloatOOBfill
    element_bytes: int

    @property
    def box_bytes(self) -> int:
        """Bytes one copy of the box moves into shared memory (the mbarrier expect-tx count)."""
        return math.prod(-(-b // e) for b, e in zip(self.box, (1,) + self.element_strides[1:])) * self.element_bytes


def _kind(value) -> str:
    return "None" if value is None else f"a {type(value).__name__}"


def _integer(field: str, value) -> int:
    """value as an int, exactly: Python and numpy integers only (never a bool, a float, even an
    integral one, a string or None: cuTensorMapEncodeTiled takes integers, nothing is coerced)."""
    if type(value) is int:
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TensorMapError(f"{field} = {value!r}: must be an integer, not {_kind(value)} "
                             "(no value is truncated or parsed)")
    return operator.index(value)


def _int_tuple(field: str, values, rank: int | None) -> tuple[int, ...]:
    """A sequence (tuple, list, torch.Size, 1-D array) of exact integers."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__") or values is None:
        raise TensorMapError(f"{field} = {values!r}: must be a sequence of integers, not "
                             f"{_kind(values)}")
    out = tuple(_integer(f"{field}[{i}]", v) for i, v in enumerate(values))
    if rank is not None and len(out) != rank:
        raise TensorMapError(f"{field} = {values!r} has {len(out)} entries; the tensor has rank {rank}")
    return out


def encode_tiled_arguments(address: int, dtype, *, shape, strides, box, swizzle: str = "none",
                           element_strides=None, l2_promotion: str = "128B",
                           oob_fill: str = "zero") -> TiledEncoding:
    """Validate a tiled tensor map and return the driver's arguments (pure Python).

    ``shape``, ``strides`` (elements) and ``box`` are outermost first; the innermost dimension must
    be contiguous (stride 1). ``element_strides`` (default all 1) too. ``swizzle`` in
    none/32B/64B/128B, ``l2_promotion`` in none/64B/128B/256B, ``oob_fill`` in zero/nan.

    Every number is taken exactly: an ``int`` or a numpy integer, never a bool, a float (64.0
    included), a string or None; the address is in 0..2^64-1 and 16-byte aligned; a dtype is
    named (None is not float64). A breach raises TensorMapError naming the field, the value
    and the rule.
    """
    dt = canonical_dtype(dtype)
    dtype_enum, esize = _DTYPES[dt]
    shape = _int_tuple("shape", shape, None)
    rank = len(shape)
    if not 1 <= rank <= MAX_RANK:
        raise TensorMapError(f"rank = {rank} (shape {shape}): a TMA tensor has rank 1..{MAX_RANK}")
    strides = _int_tuple("strides", strides, rank)
    box = _int_tuple("box", box, rank)
    element_strides = _int_tuple("element_strides",
                                 (1,) * rank if element_strides is None else element_strides, rank)
    address = _integer("global address", address)
    if not 0 <= address <= MAX_ADDRESS:
        shown = hex(address) if address >= 0 else str(address)
        raise TensorMapError(f"global address = {shown}: must be in 0..2^64-1 (a device address is "
                             "an unsigned 64-bit integer)")
    if address % GLOBAL_ALIGN:
        raise TensorMapError(f"global address = 0x{address:x}: must be {GLOBAL_ALIGN}-byte aligned "
                             f"(it is {address % GLOBAL_ALIGN} bytes past a multiple of {GLOBAL_ALIGN})")
    for i, d in enumerate(shape):
        if not 1 <= d <= MAX_DIM:
            raise TensorMapError(f"shape[{i}] = {d}: each dimension must be in 1..2^32")
    if strides[-1] != 1:
        raise TensorMapError(f"strides[-1] = {strides[-1]} elements: the innermost dimension must be "
                             "contiguous (stride 1); TMA has no stride for it")
    for i, s in enumerate(strides[:-1]):
        nbytes = s * esize
        if s <= 0:
            raise TensorMapError(f"strides[{i}] = {s} elements: strides must be positive")
        if nbytes % STRIDE_MULTIPLE:
            raise TensorMapError(f"strides[{i}] = {s} elements = {nbytes} bytes ({dt}): must be a multiple "
                                 f"of {STRIDE_MULTIPLE} bytes")
        if nbytes >= MAX_STRIDE_BYTES:
            raise TensorMapError(f"strides[{i}] = {s} elements = {nbytes} bytes: must be below 2^40 bytes")
    for i, b in enumerate(box):
        if not 1 <= b <= MAX_BOX:
            raise TensorMapError(f"box[{i}] = {b}: each box dimension must be in 1..{MAX_BOX}")
    for i, e in enumerate(element_strides):
        if not 1 <= e <= MAX_ELEMENT_STRIDE:
            raise TensorMapError(f"element_strides[{i}] = {e}: each must be in 1..{MAX_ELEMENT_STRIDE}")
    for name, value, table in (("swizzle", swizzle, SWIZZLES), ("l2_promotion", l2_promotion,
                                                                L2_PROMOTIONS), ("oob_fill", oob_fill, OOB_FILLS)):
        if not isinstance(value, str):
            raise TensorMapError(f"{name} = {value!r}: must be one of {list(table)} (a str), not "
                                 f"{_kind(value)}")
    if swizzle not in SWIZZLES:
        raise TensorMapError(f"swizzle = {swizzle!r}: must be one of {list(SWIZZLES)}")
    swizzle_enum, span = SWIZZLES[swizzle]
    inner_bytes = box[-1] * esize
    if inner_bytes % INNER_BOX_MULTIPLE:
        raise TensorMapError(f"box[-1] (innermost) = {box[-1]} elements = {inner_bytes} bytes ({dt}): "
                             f"the inner box must span a multiple of {INNER_BOX_MULTIPLE} bytes")
    if span is not None and inner_bytes > span:
        raise TensorMapError(f"box[-1] (innermost) = {box[-1]} elements = {inner_bytes} bytes: with swizzle "
                             f"{swizzle} the inner box must span at most {span} bytes")
    if l2_promotion not in L2_PROMOTIONS:
        raise TensorMapError(f"l2_promotion = {l2_promotion!r}: must be one of {list(L2_PROMOTIONS)}")
    if oob_fill not in OOB_FILLS:
        raise TensorMapError(f"oob_fill = {oob_fill!r}: must be one of {list(OOB_FILLS)}")
    if oob_fill == "nan" and dt not in _FLOAT_DTYPES:
        raise TensorMapError(f"oob_fill = 'nan' with dtype {dt}: NaN fill needs a floating-point dtype")
    return TiledEncoding(
        dtype=dtype_enum, rank=rank, global_address=address, global_dims=shape[::-1],
        global_strides=tuple(s * esize for s in strides[-2::-1]), box=box[::-1],
        element_strides=element_strides[::-1], interleave=0, swizzle=swizzle_enum,
        l2_promotion=L2_PROMOTIONS[l2_promotion], oob_fill=OOB_FILLS[oob_fill], element_bytes=esize)


def _tensor_facts(tensor):
    """(address, dtype, shape, strides in elements, device ordinal or None) of a tensor-like object."""
    from .arguments import device_address  # the one place that reads tensors' pointers
    try:
        address, dev = device_address(tensor)
    except TypeError as exc:
        raise TensorMapError(f"tensor: {exc}") from None
    if hasattr(tensor, "stride") and callable(tensor.stride):  # torch.Tensor
        return address, tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()), dev
    cai = getattr(tensor, "__cuda_array_interface__", None)
    if cai is not None:
        dt = np.dtype(cai["typestr"])
        shape = tuple(cai["shape"])
        if cai.get("strides") is None:
            strides = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
        else:
            strides = tuple(s // dt.itemsize for s in cai["strides"])
        return address, dt, shape, strides, dev
    raise TensorMapError(f"tensor = {type(tensor).__name__}: give a torch tensor, a DeviceBuffer or an "
                         "object with __cuda_array_interface__, or use TensorMap.from_address")


def _strides_array(u64, e: TiledEncoding) -> list:
    """globalStrides for the driver: a rank-1 map has none, but cuTensorMapEncodeTiled refuses
    the NULL pointer an empty list becomes (CUDA_ERROR_INVALID_VALUE, seen on the H200), so it
    gets one entry the driver does not read (it reads rank - 1): the row's bytes, rounded up
    to the stride multiple."""
    if e.rank > 1:
        return [u64(s) for s in e.global_strides]
    row = e.global_dims[0] * e.element_bytes
    return [u64(-(-row // STRIDE_MULTIPLE) * STRIDE_MULTIPLE)]


class TensorMap:
    """An encoded CUtensorMap; pass it as a kernel argument (its 128 bytes go by value).

    Keep the tensor alive while kernels use the map: the map holds its address, not a reference.
    """

    def __init__(self, encoding: TiledEncoding, device: int | None = None):
        cu = driver.bindings()
        driver.initialize()
        e = encoding
        u64, u32 = cu.cuuint64_t, cu.cuuint32_t  # cuda-python rejects plain ints in these arrays
        dev = driver.device(device) if device is not None else driver.current_device()
        with dev.activated():  # the driver wants a current context even for this host-side encoding
            self._handle = driver.check(cu.cuTensorMapEncodeTiled(
                cu.CUtensorMapDataType(e.dtype), e.rank, e.global_address,
                [u64(d) for d in e.global_dims], _strides_array(u64, e),
                [u32(b) for b in e.box], [u32(s) for s in e.element_strides],
                cu.CUtensorMapInterleave(e.interleave), cu.CUtensorMapSwizzle(e.swizzle),
                cu.CUtensorMapL2promotion(e.l2_promotion), cu.CUtensorMapFloatOOBfill(e.oob_fill)),
                "cuTensorMapEncodeTiled")
        self.encoding = encoding
        self.device = device
        self.packed = ctypes.string_at(self._handle.getPtr(), TENSORMAP_BYTES)

    @classmethod
    def from_address(cls, address: int, dtype, *, shape, strides, box, device: int | None = None,
                     **options) -> TensorMap:
        """A tiled map over raw device memory at ``address`` (options as :func:`encode_tiled_arguments`)."""
        return cls(encode_tiled_arguments(address, dtype, shape=shape, strides=strides, box=box, **options),
                   device)

    @classmethod
    def tiled(cls, tensor, box, **options) -> TensorMap:
        """A tiled map over a whole tensor (torch tensor, DeviceBuffer, array-interface object).

        ``box`` is outermost first, like the tensor's shape; options as :func:`encode_tiled_arguments`.
        """
        address, dtype, shape, strides, dev = _tensor_facts(tensor)
        return cls(encode_tiled_arguments(address, dtype, shape=shape, strides=strides, box=box, **options),
                   dev)

    def getPtr(self) -> int:  # noqa: N802 - the cuda-python name, so a TensorMap fits where a CUtensorMap does
        """Host address of the encoded 128-byte CUtensorMap."""
        return self._handle.getPtr()

    def __repr__(self) -> str:
        e = self.encoding
        return (f"TensorMap(dims={e.global_dims[::-1]}, box={e.box[::-1]}, swizzle={e.swizzle}, "
                f"address=0x{e.global_address:x}, device={self.device})")
