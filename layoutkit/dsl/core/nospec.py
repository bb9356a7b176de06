"""`@lk.kernel(do_not_specialize=...)`: facts that do not specialize a kernel, so one cubin
serves every value of them (a model's batch size M, a sequence length).

A name in do_not_specialize is one of:

    an integer parameter (`"M"`)     its value no longer specializes: not whether it is 1 nor a
                                     multiple of 16; only its sign does (positive or not), so
                                     every positive M shares one specialization, where the kernel
                                     sees M as a positive integer symbol
    a Tensor parameter (`"q"`)       the divisibility of each of its extents no longer
                                     specializes (every extent is '+': positive)
    one extent (`"q_shape1"`)        that extent only (the name the kernel's layout shows)

A tensor's strides and alignment keep specializing (they decide whether a mode is contiguous,
hence vector accesses and TMA); a pointer's alignment, a float (never specialized) and a
constexpr (its value *is* the kernel) cannot be named. Any other name is a
KernelDefinitionError listing the names that can.
"""
from __future__ import annotations

from .arguments import field_names
from .errors import KernelDefinitionError

__all__ = ["relaxed_facts", "relaxed_names", "relax", "relaxed_int"]


def relaxed_int(fact: str) -> str:
    """An integer's fact under do_not_specialize: '+' for a positive value, else ''."""
    return "" if fact == "" else "+"


def relaxed_facts(kernel: str, params, names, where) -> dict[int, tuple[int, ...] | None]:
    """{parameter index: None (an integer) or the extent modes (a tensor)} for the names of
    do_not_specialize; KernelDefinitionError naming a name that is not one (module docstring)."""
    if names is None:
        return {}
    if isinstance(names, str):
        names = (names,)
    try:
        names = tuple(names)
    except TypeError:
        names = (names,)
    relaxed: dict[int, object] = {}
    allowed = []
    by_field, strides = {}, set()
    for i, p in enumerate(params):
        if p.kind == "tensor":
            rank = p.annotation.rank
            allowed.append(p.name)
            strides.update(field_names(p)[rank:])
            for mode, name in enumerate(field_names(p)[:rank]):
                by_field[name] = (i, mode)
                allowed.append(name)
        elif p.kind == "scalar" and p.annotation.is_int:
            allowed.append(p.name)
    index = {p.name: i for i, p in enumerate(params)}
    for name in names:
        if not isinstance(name, str):
            raise KernelDefinitionError(f"kernel {kernel}: do_not_specialize holds {name!r}; "
                                        "give parameter names (str)", where)
        if name in by_field:
            i, mode = by_field[name]
            if relaxed.get(i, ()) is not None:
                relaxed[i] = tuple(sorted(set(relaxed.get(i, ())) | {mode}))
            continue
        i = index.get(name)
        p = None if i is None else params[i]
        if p is not None and p.kind == "tensor":
            relaxed[i] = tuple(range(p.annotation.rank))
        elif p is not None and p.kind == "scalar" and p.annotation.is_int:
            relaxed[i] = None
        else:
            why = _why_not(name, p, name in strides)
            raise KernelDefinitionError(
                f"kernel {kernel}: do_not_specialize names {name!r}, {why}; it takes integer "
                f"parameters, Tensor parameters (all their extents) and single extents: "
                f"{', '.join(allowed) or '(this kernel has none)'}", where)
    return relaxed


def _why_not(name: str, p, stride: bool) -> str:
    if p is None:
        if stride:
            return ("a tensor stride: strides keep specializing (whether a mode is contiguous "
                    "decides vector accesses and TMA)")
        return "which is no parameter of the kernel (nor an extent of a Tensor parameter)"
    if p.kind == "constexpr":
        return "a constexpr: its value is the kernel (make it an lk.i32 parameter instead)"
    if p.kind == "pointer":
        return "a Pointer: its only fact is its 16-byte alignment, which keeps specializing"
    return f"a {p.annotation} parameter, which is never specialized"


def relaxed_names(params, relaxed: dict) -> tuple[str, ...]:
    """The relaxed facts as do_not_specialize names, in parameter order: an integer's or a whole
    tensor's name, else the tensor's extent names."""
    names = []
    for i in sorted(relaxed):
        p, modes = params[i], relaxed[i]
        if modes is None or len(modes) == p.annotation.rank:
            names.append(p.name)
        else:
            names += [field_names(p)[m] for m in modes]
    return tuple(names)


def relax(params, entries: tuple, relaxed: dict) -> tuple:
    """The key entries `entries` (one per parameter) with the relaxed facts dropped."""
    out = list(entries)
    for i, modes in relaxed.items():
        if modes is None:
            out[i] = relaxed_int(out[i])
        else:
            entry = list(out[i])
            for mode in modes:
                entry[2 + mode] = "+"
            out[i] = tuple(entry)
    return tuple(out)
