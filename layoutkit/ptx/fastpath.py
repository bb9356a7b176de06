"""The per-signature fast packing function: the launch path of the common case in straight-line code.

``build_fast_pack(packer)`` writes, for one :class:`~layoutkit.ptx.arguments.ArgumentPacker`, a small
Python function specialised to its signature (the way ``dataclasses`` writes ``__init__``): every
pointer argument an exact torch tensor on one CUDA device, every integer an exact ``int``, every
float an exact ``float``, every tensor map a TensorMap. It packs the parameter buffer with one
``struct.pack_into`` (which also range-checks the integers) and returns the device ordinal (None
when no argument names one). Any doubt raises :class:`NotFast` (or the error of the failing
operation) and the caller re-packs through the checked path, which words every error; so this
function never decides that an argument is wrong, only that it is certainly right. The same
checks (:func:`argument_checks`) open the configured launcher (layoutkit.ptx.launcher).

>>> from layoutkit.ptx.signature import parse_entry
>>> from layoutkit.ptx.arguments import ArgumentPacker
>>> packer = ArgumentPacker(parse_entry(".entry k(.param .u64 .ptr.align 16 x, .param .u32 n) { ret; }"))
>>> print(build_fast_pack(packer)[1])
def fast_pack(args):
    a0, a1 = args
    if type(a0) is not T or type(a1) is not int:
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

from .code_cache import compiled
from .signature import ParamKind

__all__ = ["FAST_PATH_MISSES", "NeverATensor", "NotFast", "argument_checks", "build_fast_pack",
           "compile_function", "fast_namespace"]


class NotFast(Exception):
    """The arguments are not certainly the common case: take the checked path."""


# What a generated fast_pack may raise when its assumptions fail; the caller then takes the checked path.
FAST_PATH_MISSES = (NotFast, struct.error, ValueError, TypeError, AttributeError, OverflowError)


def build_fast_pack(packer, torch_tensor_type=None):
    """(function, source) of the fast packing function for ``packer`` (see the module docstring).

    ``torch_tensor_type``: the class pointer arguments must have (``torch.Tensor``); with None, a
    signature with pointer parameters never takes the fast path.
    """
    lines = ["def fast_pack(args):"]
    names = [f"a{i}" for i in range(len(packer.params))]
    if names:
        lines.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = args")
    else:
        lines.append("    if args:\n        raise NotFast")
    checks, values = argument_checks(packer.params, "raise NotFast", on_device=None)
    lines += checks
    lines.append(f"    pack_into(storage, base{''.join(', ' + v for v in values)})")
    lines.append("    return d")
    namespace = {"NotFast": NotFast}
    return compile_function("\n".join(lines), f"fast_pack {packer.signature.name}",
                            fast_namespace(packer, torch_tensor_type, namespace))


def argument_checks(params, miss: str, on_device: str | None, names: list[str] | None = None,
                    only_device: bool = False, pointers_read: bool = False) -> tuple[list[str], list[str]]:
    """(lines, values): the generated checks of the unpacked arguments (``names``, default ``a0, a1,
    ...``) and the expressions ``pack_into`` takes for them.

    ``miss``: the statement that leaves the fast path. The lines leave the device ordinal in ``d``
    (None when no argument names one); with ``on_device`` (an expression, e.g. the ordinal as a
    literal) they instead require every argument that names a device to name that one, and at least
    one to name it. ``only_device``: ``on_device`` is the only CUDA device the process sees, so a
    tensor's ``is_cuda`` (an attribute read, a little cheaper than the ``get_device()`` call) says
    it is on that one. ``pointers_read``: the caller has checked the exact type of every argument
    and bound pointer argument i's ``data_ptr()`` to ``p<i>``; the lines still test pointers
    against ``T`` (which the checked path sets once torch is imported: a launcher configured
    before that takes no tensor until then), then devices and alignment.
    """
    names = names or [f"a{i}" for i in range(len(params))]
    pointers = [i for i, p in enumerate(params) if p.kind in (ParamKind.POINTER, ParamKind.INT_OR_POINTER)]
    tensormaps = [i for i, p in enumerate(params) if p.kind is ParamKind.TENSORMAP]
    types = {ParamKind.INT: "int", ParamKind.FLOAT: "float"}
    if any(p.kind is ParamKind.BYTES for p in params):
        return [f"    {miss}  # by-value byte arrays always take the checked path"], []
    typed = [f"type({names[i]}) is not {'T' if i in pointers else types[p.kind]}"
             for i, p in enumerate(params) if i in pointers or (p.kind in types and not pointers_read)]
    lines, values = [], []
    if pointers and on_device:   # one test: the type checks short-circuit before the device's
        typed += [f"not {names[i]}.is_cuda" if only_device else f"{names[i]}.get_device() != {on_device}"
                  for i in pointers]
    if typed:
        lines.append(f"    if {' or '.join(typed)}:\n        {miss}")
    if pointers and not on_device:
        first, rest = pointers[0], pointers[1:]
        lines.append(f"    d = {names[first]}.get_device()")
        lines.append(f"    if {' or '.join(['d < 0'] + [f'{names[i]}.get_device() != d' for i in rest])}:\n"
                     f"        {miss}")
    elif not on_device:
        lines.append("    d = None")
    device = on_device or "d"
    for i, (p, a) in enumerate(zip(params, names)):
        if i in pointers:
            if not pointers_read:
                lines.append(f"    p{i} = {a}.data_ptr()")
            if p.kind is ParamKind.POINTER and p.pointer_align > 1:
                lines.append(f"    if p{i} % {p.pointer_align}:\n        {miss}")
            values.append(f"p{i}")
        elif i in tensormaps:
            lines.append(f"    m{i} = getattr({a}, 'packed', None)\n    if type(m{i}) is not bytes:\n        {miss}")
            lines.append(f"    e{i} = getattr({a}, 'device', None)")
            if pointers or on_device:
                lines.append(f"    if e{i} is not None and e{i} != {device}:\n        {miss}")
            else:
                lines.append(f"    if e{i} is not None:\n        if d is None:\n            d = e{i}\n"
                             f"        elif e{i} != d:\n            {miss}")
            values.append(f"m{i}")
        else:
            values.append(a)
    if on_device and not pointers and tensormaps:  # the device must be named by a tensor map
        lines.append(f"    if {' and '.join(f'e{i} is None' for i in tensormaps)}:\n        {miss}")
    elif on_device and not pointers:
        lines.append(f"    {miss}  # no argument names a device: launch() takes the current one")
    return lines, values


def fast_namespace(packer, torch_tensor_type, namespace: dict) -> dict:
    """``namespace`` plus what :func:`argument_checks`' lines and ``pack_into`` of ``packer`` need."""
    has_pointers = any(p.kind in (ParamKind.POINTER, ParamKind.INT_OR_POINTER) for p in packer.params)
    namespace.update({"T": (torch_tensor_type or NeverATensor) if has_pointers else None,
                      "pack_into": packer._struct.pack_into, "storage": packer._storage, "base": packer._base})
    return namespace


def compile_function(source: str, label: str, namespace: dict):
    """(function, source): the function ``source`` defines (its first line: ``def NAME(...):``),
    compiled with ``namespace`` as its globals. The code is compiled once per (source, label)
    and machine (layoutkit.ptx.code_cache: in memory, and on disk for new processes): every
    ArgumentPacker of a signature (each configured launcher has one, and so does each
    LaunchParts) writes the same fast_pack, which compile() would take ~0.7 ms to redo."""
    exec(compiled(source, f"<layoutkit {label}>"), namespace)
    return namespace[source[4:source.index("(")]], source


class NeverATensor:
    """Stands for torch.Tensor before torch is imported: no argument has this type."""
