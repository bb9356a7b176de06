"""Kernel parameters and the specialization key of a call's arguments.

A key holds, per parameter: for a pointer its dtype and whether the address is 16-byte aligned;
for an integer whether it equals 1, is a positive multiple of 16, is positive, or none of these;
for a tensor its alignment, index width and per mode the facts of its extent and stride (see
layoutkit.dsl.core.tensor_args); for a float nothing; for a constexpr its value. Computing it is a
few type checks per argument, so picking the compiled specialization at launch is one dict lookup.
"""
from __future__ import annotations

import numbers
import sys
from dataclasses import dataclass

from layoutkit.ptx import device_address

from .errors import ConstexprError, KernelArgumentError
from .tensor_args import tensor_fact
from .types import DType, PointerType, TensorType, constexpr, host_dtype

INT_RANGE = {"i32": (-(1 << 31), (1 << 31) - 1), "i64": (-(1 << 63), (1 << 63) - 1),
             "u32": (0, (1 << 32) - 1)}


@dataclass(frozen=True)
class Parameter:
    """One kernel parameter: `name`, `kind` in {"pointer", "tensor", "scalar", "constexpr"} and
    its annotation (`PointerType`, `TensorType`, `DType` or `constexpr`)."""

    name: str
    kind: str
    annotation: object

    def describe(self) -> str:
        ann = self.annotation
        return f"{self.name}: {'lk.constexpr' if ann is constexpr else ann}"


def parameter(name: str, annotation) -> Parameter | None:
    """The Parameter for an annotation, or None when the annotation is not a kernel type."""
    if annotation is constexpr:
        return Parameter(name, "constexpr", annotation)
    if isinstance(annotation, PointerType):
        return Parameter(name, "pointer", annotation)
    if isinstance(annotation, TensorType):
        return Parameter(name, "tensor", annotation)
    if isinstance(annotation, DType) and annotation.kind != "bool" and \
            annotation.name not in ("f16", "bf16") and not annotation.storage_only:
        return Parameter(name, "scalar", annotation)
    return None


def _address(value) -> tuple[int | None, DType | None]:
    """(device or host address, element dtype) of an array-like argument, else (None, None).
    Host arrays (numpy, CPU tensors) count: specializations build and print without a GPU."""
    try:
        address = device_address(value)[0]  # CUDA tensors, DeviceBuffers, CUDA array interfaces
    except TypeError:
        iface = getattr(value, "__array_interface__", None)
        data_ptr = getattr(value, "data_ptr", None)          # a CPU torch tensor
        if iface is not None:
            address = int(iface["data"][0])
        elif callable(data_ptr):
            address = int(data_ptr())
        else:
            return None, None
    return address, host_dtype(value)


def pointer_fact(p: Parameter, value) -> bool:
    """Whether the pointer argument is 16-byte aligned (its key entry); checks the dtype."""
    want = p.annotation.dtype
    if isinstance(value, PointerType):                       # a description, for introspection
        if value.dtype != want:
            raise KernelArgumentError(f"argument {p.name}: {value} given for {p.describe()}")
        return True
    address, dtype = _address(value)
    if address is None:
        raise KernelArgumentError(f"argument {p.name}: {value!r} is not an array (a torch "
                                  f"tensor, DeviceBuffer or array-interface object) for "
                                  f"{p.describe()}")
    if dtype is not None and dtype != want:
        raise KernelArgumentError(f"argument {p.name}: an array of {dtype} given for "
                                  f"{p.describe()} (no implicit conversion)")
    if dtype is None and _is_torch_tensor(value):   # a torch dtype no kernel type matches
        raise KernelArgumentError(f"argument {p.name}: a tensor of {value.dtype} given for "
                                  f"{p.describe()} (no implicit conversion)")
    return address % 16 == 0


def _is_torch_tensor(value) -> bool:
    torch = sys.modules.get("torch")       # never imported here: only if the program did
    tensor = getattr(torch, "Tensor", None)
    return isinstance(tensor, type) and isinstance(value, tensor)


def int_fact(p: Parameter, value) -> str:
    """'1', '16' (positive multiple of 16), '+' (positive) or '' for an integer argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise KernelArgumentError(f"argument {p.name}: {value!r} is not an integer for "
                                  f"{p.describe()}")
    lo, hi = INT_RANGE[p.annotation.name]
    if not lo <= value <= hi:
        raise KernelArgumentError(f"argument {p.name}: {value} does not fit {p.annotation} "
                                  f"({lo}..{hi})")
    if value == 1:
        return "1"
    if value > 0:
        return "16" if value % 16 == 0 else "+"
    return ""


def key_entry(p: Parameter, value):
    if p.kind == "pointer":
        return pointer_fact(p, value)
    if p.kind == "tensor":
        return tensor_fact(p, value)
    if p.kind == "constexpr":
        try:
            hash(value)
        except TypeError:
            raise ConstexprError(f"constexpr {p.name} = {value!r} is not hashable; a constexpr "
                                 "is part of the specialization key (use a tuple, not a list)") \
                from None
        return (type(value).__name__, value)
    if p.annotation.is_int:
        return int_fact(p, value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise KernelArgumentError(f"argument {p.name}: {value!r} is not a number for "
                                  f"{p.describe()}")
    return None


def bind(params: tuple[Parameter, ...], args: tuple, kwargs: dict, name: str) -> tuple:
    """The arguments in parameter order (positional, then by name)."""
    if not kwargs and len(args) == len(params):
        return args
    if len(args) > len(params):
        raise KernelArgumentError(f"kernel {name} takes {len(params)} arguments "
                                  f"({', '.join(p.name for p in params)}), got {len(args)}")
    values = list(args) + [None] * (len(params) - len(args))
    given = [True] * len(args) + [False] * (len(params) - len(args))
    names = {p.name: i for i, p in enumerate(params)}
    for key, value in kwargs.items():
        if key not in names:
            raise KernelArgumentError(f"kernel {name} has no parameter {key!r}; parameters: "
                                      f"{', '.join(p.name for p in params)}")
        if given[names[key]]:
            raise KernelArgumentError(f"kernel {name}: argument {key!r} given twice")
        values[names[key]], given[names[key]] = value, True
    missing = [p.name for p, g in zip(params, given) if not g]
    if missing:
        raise KernelArgumentError(f"kernel {name}: missing argument(s) {', '.join(missing)}")
    return tuple(values)


def field_names(p: Parameter) -> tuple[str, ...]:
    """The names of a tensor parameter's integer parameters, extents then strides (also the
    symbols the kernel sees): `q_shape0, ..., q_stride0, ...`."""
    rank = p.annotation.rank
    return tuple(f"{p.name}_shape{d}" for d in range(rank)) + \
        tuple(f"{p.name}_stride{d}" for d in range(rank))


def name_clash(params: tuple[Parameter, ...]) -> str | None:
    """A parameter named like another tensor parameter's extents or strides, or None."""
    names = {p.name for p in params}
    for p in params:
        if p.kind == "tensor":
            for field in field_names(p):
                if field in names:
                    return (f"parameter {field} is named like the extent/stride parameter of "
                            f"tensor {p.name} ({p.name}_shape<d>, {p.name}_stride<d>); rename it")
    return None
