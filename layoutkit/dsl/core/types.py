"""Element types and parameter annotations: `lk.f32`, `lk.Pointer[lk.bf16]`,
`lk.Tensor[lk.bf16, 2]`, `lk.constexpr`.

One table (`DTYPES`) holds each element type's facts: byte size, kind and the PTX type of the
register that holds one value. The 8-bit floats e4m3 and e5m2 (OCP FP8; torch.float8_e4m3fn and
torch.float8_e5m2) are storage types: PTX has no arithmetic on them, so a kernel loads, stores,
TMA-copies and wgmma-multiplies them and converts them with `lk.cast` (their registers are .b8).
Kernel parameters are annotated with a DType (a scalar passed by
value), `Pointer[dtype]` (a device pointer to dtype elements), `Tensor[dtype, rank]` (a tensor:
its pointer, shape and strides in one parameter; see layoutkit.dsl.core.tensor_args) or
`constexpr` (a Python value baked into the specialization).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    """An element type: `name` (as users write it), `ptx` (its register's PTX type), `nbytes`,
    `kind` in {"int", "uint", "float", "bool"}; `storage_only`: no arithmetic, comparison or
    constant of the type exists in PTX (fp8): values are converted with lk.cast first."""

    name: str
    ptx: str
    nbytes: int
    kind: str
    storage_only: bool = False

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__


i32 = DType("i32", "s32", 4, "int")
i64 = DType("i64", "s64", 8, "int")
u32 = DType("u32", "u32", 4, "uint")
f16 = DType("f16", "f16", 2, "float")
bf16 = DType("bf16", "bf16", 2, "float")
f32 = DType("f32", "f32", 4, "float")
f64 = DType("f64", "f64", 8, "float")
bool_ = DType("bool", "pred", 1, "bool")
e4m3 = DType("e4m3", "b8", 1, "float", storage_only=True)   # 4 exponent bits, max 448, no inf
e5m2 = DType("e5m2", "b8", 1, "float", storage_only=True)   # 5 exponent bits, max 57344, inf
FP8 = (e4m3, e5m2)

DTYPES: dict[str, DType] = {t.name: t for t in (i32, i64, u32, f16, bf16, f32, f64, bool_,
                                                e4m3, e5m2)}
# numpy / torch dtype names of the same element types (for argument checks); numpy has no fp8:
# the CPU interpreter takes uint8 bit patterns for it (interpreter.to_fp8), as uint16 for bf16
HOST_NAMES: dict[str, DType] = {
    "int32": i32, "int64": i64, "uint32": u32, "float16": f16, "bfloat16": bf16,
    "float32": f32, "float64": f64, "bool": bool_, "float8_e4m3fn": e4m3, "float8_e5m2": e5m2,
}


@dataclass(frozen=True)
class TensorMapType:
    """The type of a TMA tensor-map kernel parameter (a by-value CUtensorMap the DSL derives
    from a global tensor's layout and a shared tile's layout, encoded at launch)."""

    def __str__(self) -> str:
        return "tensormap"


tensormap = TensorMapType()


@dataclass(frozen=True)
class PointerType:
    """The annotation `Pointer[dtype]`: a global-memory address of `dtype` elements."""

    dtype: DType

    def __str__(self) -> str:
        return f"Pointer[{self.dtype}]"

    __repr__ = __str__


class Pointer:
    """`Pointer[lk.f32]` annotates a kernel parameter as a device pointer to f32 elements.

    >>> Pointer[f32]
    Pointer[f32]
    """

    def __class_getitem__(cls, dtype) -> PointerType:
        if not isinstance(dtype, DType) or dtype is bool_:
            raise TypeError(f"Pointer[...] takes an element type such as lk.f32, got {dtype!r}")
        return PointerType(dtype)


@dataclass(frozen=True)
class TensorType:
    """The annotation `Tensor[dtype, rank]`: a tensor of `rank` modes of `dtype` elements in
    global memory, passed as one argument (a torch tensor, a DLPack or CUDA-array-interface
    object, a numpy array for the CPU interpreter) and bound to a pointer, `rank` extents and
    `rank` strides."""

    dtype: DType
    rank: int

    def __str__(self) -> str:
        return f"Tensor[{self.dtype}, {self.rank}]"

    __repr__ = __str__


MAX_TENSOR_RANK = 8


class Tensor:
    """`Tensor[lk.bf16, 4]` annotates a kernel parameter as a 4-mode bf16 tensor: inside the
    kernel a GlobalTensor whose shape and strides are the argument's (symbols; a stride of 0 or
    1 is that constant), outside any torch tensor, DLPack or `__cuda_array_interface__` object.

    >>> Tensor[bf16, 4]
    Tensor[bf16, 4]
    """

    def __class_getitem__(cls, item) -> TensorType:
        dtype, rank = item if isinstance(item, tuple) and len(item) == 2 else (item, None)
        if not isinstance(dtype, DType) or dtype is bool_:
            raise TypeError(f"Tensor[dtype, rank] takes an element type such as lk.bf16 first, "
                            f"got {dtype!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or \
                not 1 <= rank <= MAX_TENSOR_RANK:
            raise TypeError(f"Tensor[dtype, rank] takes a rank in 1..{MAX_TENSOR_RANK} second "
                            f"(Tensor[{dtype}, 2] for a matrix), got {rank!r}")
        return TensorType(dtype, rank)


class constexpr:
    """Annotation of a parameter whose Python value is fixed at trace time (part of the
    specialization key); Python control flow over it unrolls."""


def host_dtype(value) -> DType | None:
    """The element type of a numpy array / torch tensor (None if the object does not say)."""
    dt = getattr(value, "dtype", None)
    if dt is None:
        return None
    name = str(dt).removeprefix("torch.")
    return HOST_NAMES.get(name)
