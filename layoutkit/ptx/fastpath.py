"""The per-signature fast packing function: the launch path of the common case in straight-line code.

``build_fast_pack(packer)`` writes, for one :class:`~layoutkit.ptx.arguments.ArgumentPacker`, a small
Python function specialised to its signature (the way ``dataclasses`` writes ``__init__``): every
pointer argument an exact torch tensor on one CUDA device, every integer an exact ``int``, every
float an exact ``float``, every tensor map a TensorMap. It packs the parameter buffer with one
``struct.pack_into`` (which also range-checks the integers) and returns the device ordinal (None
when no argument names one). Any doubt raises :class:`NotFast` (or the error of the failing
operation) and the caller re-packs through the checked path, which words every error; so this
function never decides that an argument is wrong, only that it is certainly right.

>>> from layoutkit.ptx.signature import parse_entry
>>> from layoutkit.ptx.arguments import ArgumentPacker
>>> packer = ArgumentPacker(parse_entry(".entry k(.param .u64 .ptr.align 16 x, .param .u32 n) { ret; }"))
>>> print(build_fast_pack(packer)[1])
def fast_pack(args):
    a0, a1 = args
    if type(a0) is not T:
        raise NotFast
    if type(a1) is not int:
        raise NotFast
    d = a0.get_device()
    if d < 0:
        raise NotFast
    p0 = a0.data_ptr()
    if p0 % 16:
        raise NotFast
    pack_into(storage, base, p0, a1)
    return d
"""
from __future__ import annotations

import struct

from .signature import ParamKind

__all__ = ["FAST_PATH_MISSES", "NotFast", "build_fast_pack"]


class NotFast(Exception):
    """The arguments are not certainly the common case: take the checked path."""


# What a generated fast_pack may raise when its assumptions fail; the caller then takes the checked path.
FAST_PATH_MISSES = (NotFast, struct.error, ValueError, TypeError, AttributeError, OverflowError)


def build_fast_pack(packer, torch_tensor_type=None):
    """(function, source) of the fast packing function for ``packer`` (see the module docstring).

    ``torch_tensor_type``: the class pointer arguments must have (``torch.Tensor``); with None, a
    signature with pointer parameters never takes the fast path.
    """
    params = packer.params
    lines = ["def fast_pack(args):"]
    names = [f"a{i}" for i in range(len(params))]
    if names:
        lines.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = args")
    else:
        lines.append("    if args:\n        raise NotFast")
    pointers = [i for i, p in enumerate(params) if p.kind in (ParamKind.POINTER, ParamKind.INT_OR_POINTER)]
    checks = {ParamKind.INT: "int", ParamKind.FLOAT: "float"}
    values = []
    for i, p in enumerate(params):
        if p.kind is ParamKind.BYTES:
            lines.append("    raise NotFast  # by-value byte arrays always take the checked path")
        elif i in pointers:
            lines.append(f"    if type(a{i}) is not T:\n        raise NotFast")
        elif p.kind in checks:
            lines.append(f"    if type(a{i}) is not {checks[p.kind]}:\n        raise NotFast")
    if pointers:
        first, rest = pointers[0], pointers[1:]
        lines.append(f"    d = a{first}.get_device()")
        cond = " or ".join(["d < 0"] + [f"a{i}.get_device() != d" for i in rest])
        lines.append(f"    if {cond}:\n        raise NotFast")
    else:
        lines.append("    d = None")
    for i, p in enumerate(params):
        if i in pointers:
            if p.kind is ParamKind.POINTER and p.pointer_align > 1:
                lines.append(f"    p{i} = a{i}.data_ptr()\n    if p{i} % {p.pointer_align}:\n        raise NotFast")
                values.append(f"p{i}")
            else:
                values.append(f"a{i}.data_ptr()")
        elif p.kind is ParamKind.TENSORMAP:
            lines.append(f"    m{i} = a{i}.packed\n    if type(m{i}) is not bytes:\n        raise NotFast")
            lines.append(f"    e{i} = a{i}.device")
            if pointers:
                lines.append(f"    if e{i} is not None and e{i} != d:\n        raise NotFast")
            else:
                lines.append(f"    if e{i} is not None:\n        if d is None:\n            d = e{i}\n"
                             f"        elif e{i} != d:\n            raise NotFast")
            values.append(f"m{i}")
        else:
            values.append(f"a{i}")
    lines.append(f"    pack_into(storage, base{''.join(', ' + v for v in values)})")
    lines.append("    return d")
    source = "\n".join(lines)
    namespace = {"NotFast": NotFast, "T": torch_tensor_type if pointers else None,
                 "pack_into": packer._struct.pack_into, "storage": packer._storage, "base": packer._base}
    if pointers and torch_tensor_type is None:
        namespace["T"] = _NeverATensor
    exec(compile(source, f"<layoutkit fast_pack {packer.signature.name}>", "exec"), namespace)
    return namespace["fast_pack"], source


class _NeverATensor:
    """Stands for torch.Tensor before torch is imported: no argument has this type."""
