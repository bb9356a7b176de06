"""Element types and parameter annotations: `lk.f32`, `lk.Pointer[lk.bf16]`, `lk.constexpr`.

One table (`DTYPES`) holds each element type's facts: byte size, kind and the PTX type of the
register that holds one value. Kernel parameters are annotated with a DType (a scalar passed by
value), `Pointer[dtype]` (a device pointer to dtype elements) or `constexpr` (a Python value
baked into the specialization).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    """An element type: `name` (as users write it), `ptx` (its register's PTX type), `nbytes`,
    `kind` in {"int", "uint", "float", "bool"}."""

    name: str
    ptx: str
    nbytes: int
    kind: str

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

DTYPES: dict[str, DType] = {t.name: t for t in (i32, i64, u32, f16, bf16, f32, f64, bool_)}
# numpy / torch dtype names of the same element types (for argument checks)
HOST_NAMES: dict[str, DType] = {
    "int32": i32, "int64": i64, "uint32": u32, "float16": f16, "bfloat16": bf16,
    "float32": f32, "float64": f64, "bool": bool_,
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
