"""The launch fast path: `kernel[grid](args)` with plain arguments finds its specialization and
configured launcher in straight-line code, a few hundred nanoseconds above the launcher.

For each kernel one function is generated from its parameters (the way layoutkit.ptx writes one
per PTX signature). It takes the grid and the call's arguments (keywords bound by Python's own
call of a generated `_lk_bind`), and computes the specialization key that `Kernel.key` would,
when every argument is the common case:

    pointer     an exact torch.Tensor of the annotated dtype      -> 16-byte aligned: data_ptr & 15
    integer     an exact int in the annotated type's range        -> '1', '16', '+' or ''
    float       an exact float                                    -> None
    constexpr   any value (an unhashable one fails the lookup)    -> (type name, value)

then, when the key's specialization exists, has no hidden parameters and already has a
configured launcher for this grid, launches through it and returns True; else it returns False
before launching anything. It never decides that an argument is wrong: anything else (numpy arrays, another dtype, a bool, a first launch) goes
through `Kernel.launch`, whose checks word every error. Both paths compute a key from the same
facts, so they pick the same specialization; the launcher itself still checks each pointer's
alignment and device.

>>> from layoutkit.dsl.arguments import parameter
>>> from layoutkit.dsl.types import Pointer, f32, i32, constexpr
>>> params = [parameter("x", Pointer[f32]), parameter("n", i32), parameter("V", constexpr)]
>>> print(fast_launch_source(params, debug_fixed=False))
def fast_launch(_lk_grid, _lk_args, _lk_kwargs):
    if _lk_kwargs:
        try:
            _lk_args = _lk_bind(*_lk_args, **_lk_kwargs)
        except TypeError:   # a wrong count or name: the checked path words it
            return False
    elif _lk_len(_lk_args) != 3:
        return False
    x, n, V = _lk_args
    if _lk_type(x) is not _lk_T or _lk_type(n) is not _lk_int:
        return False
    if x.dtype is not _lk_D0:
        return False
    if not (-2147483648 <= n <= 2147483647):
        return False
    try:
        _lk_spec = _lk_specs((not x.data_ptr() & 15, '1' if n == 1 else ('+' if n & 15 else '16') if n > 0 else '', (_lk_type(V).__name__, V), _lk_options[_lk_debug()]))
        _lk_launcher = None if _lk_spec is None else _lk_spec._launchers.get(_lk_grid)
    except TypeError:   # an unhashable constexpr or grid: the checked path words it
        return False
    if _lk_launcher is None or _lk_spec.has_hidden:
        return False
    _lk_launcher(x, n)
    return True
"""
from __future__ import annotations

import sys

from layoutkit.ptx import debug_enabled

from .arguments import INT_RANGE, Parameter
from .types import HOST_NAMES, DType

__all__ = ["bind_source", "build_fast_launch", "fast_launch_source", "no_fast_launch", "torch_module"]

PREFIX = "_lk_"   # the generated code's own names; a kernel parameter may not start with it


def torch_module():
    """The torch module if the program imported it (the DSL never imports torch), else None."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and hasattr(torch, "Tensor") else None


def torch_dtypes(torch) -> dict[DType, object]:
    """{layoutkit dtype: torch dtype object} for the dtypes torch and `host_dtype` both name."""
    found = {}
    for name, dtype in HOST_NAMES.items():
        obj = getattr(torch, name, None)
        if obj is not None and str(obj).removeprefix("torch.") == name:
            found[dtype] = obj
    return found


def fast_launch_source(params: list[Parameter], debug_fixed: bool) -> str:
    """The source of `fast_launch(_lk_grid, _lk_args, _lk_kwargs)` (see the module docstring).
    Its globals: _lk_T (torch.Tensor), _lk_D<i> (torch dtype of pointer i), _lk_specs (the
    kernel's specialization lookup), _lk_bind (returns its arguments, which are the kernel's
    parameters), _lk_options ({debug flag: KernelOptions}) and _lk_debug, or _lk_option (the
    KernelOptions, with `debug_fixed`), _lk_type, _lk_int, _lk_float, _lk_len."""
    names = [p.name for p in params]
    typed, dtypes, ranges, facts, runtime = [], [], [], [], []
    for i, p in enumerate(params):
        a = p.name
        if p.kind == "constexpr":
            facts.append(f"(_lk_type({a}).__name__, {a})")
            continue
        runtime.append(a)
        if p.kind == "pointer":
            typed.append(f"_lk_type({a}) is not _lk_T")
            dtypes.append(f"{a}.dtype is not _lk_D{i}")
            facts.append(f"not {a}.data_ptr() & 15")
        elif p.annotation.is_int:
            lo, hi = INT_RANGE[p.annotation.name]
            typed.append(f"_lk_type({a}) is not _lk_int")
            ranges.append(f"{lo} <= {a} <= {hi}")
            facts.append(f"'1' if {a} == 1 else ('+' if {a} & 15 else '16') if {a} > 0 else ''")
        else:
            typed.append(f"_lk_type({a}) is not _lk_float")
            facts.append("None")
    facts.append("_lk_option" if debug_fixed else "_lk_options[_lk_debug()]")
    unpacked = f"{', '.join(names)}{',' if len(names) == 1 else ''}"
    lines = ["def fast_launch(_lk_grid, _lk_args, _lk_kwargs):",
             "    if _lk_kwargs:",
             "        try:",
             "            _lk_args = _lk_bind(*_lk_args, **_lk_kwargs)",
             "        except TypeError:   # a wrong count or name: the checked path words it",
             "            return False",
             f"    elif _lk_len(_lk_args) != {len(names)}:",
             "        return False"]
    if names:
        lines.append(f"    {unpacked} = _lk_args")
    for conditions in (typed, dtypes):
        if conditions:
            lines.append(f"    if {' or '.join(conditions)}:\n        return False")
    if ranges:
        lines.append(f"    if not ({' and '.join(ranges)}):\n        return False")
    lines += ["    try:",
              f"        _lk_spec = _lk_specs(({', '.join(facts)}{',' if len(facts) == 1 else ''}))",
              "        _lk_launcher = None if _lk_spec is None else _lk_spec._launchers.get(_lk_grid)",
              "    except TypeError:   # an unhashable constexpr or grid: the checked path words it",
              "        return False",
              "    if _lk_launcher is None or _lk_spec.has_hidden:",
              "        return False",
              f"    _lk_launcher({', '.join(runtime)})",
              "    return True"]
    return "\n".join(lines)


def bind_source(params: list[Parameter]) -> str:
    """The source of `_lk_bind(<the kernel's parameters>)`, which returns them as a tuple:
    Python's own binding of positional and keyword arguments."""
    names = ", ".join(p.name for p in params)
    return f"def _lk_bind({names}):\n    return ({names}{',' if len(params) == 1 else ''})"


def build_fast_launch(name: str, params: list[Parameter], specs: dict, options, torch):
    """The fast_launch function of a kernel for `torch` (the imported module), or None when it
    can have none: a pointer dtype torch does not name, or a parameter named like the generated
    code's own names. `specs`: the kernel's {key: Specialization};
    `options`: {debug flag: KernelOptions}, or one KernelOptions when the kernel fixes debug."""
    if any(p.name.startswith(PREFIX) for p in params):
        return None
    dtypes = torch_dtypes(torch)
    namespace = {"_lk_T": torch.Tensor, "_lk_specs": specs.get, "_lk_debug": debug_enabled,
                 "_lk_type": type, "_lk_int": int, "_lk_float": float, "_lk_len": len}
    for i, p in enumerate(params):
        if p.kind == "pointer":
            if p.annotation.dtype not in dtypes:
                return None
            namespace[f"_lk_D{i}"] = dtypes[p.annotation.dtype]
    fixed = not isinstance(options, dict)
    namespace["_lk_option" if fixed else "_lk_options"] = options
    source = fast_launch_source(params, fixed) + "\n\n\n" + bind_source(params)
    exec(compile(source, f"<layoutkit fast launch of {name}>", "exec"), namespace)
    return namespace["fast_launch"]


def no_fast_launch(grid, args, kwargs) -> bool:
    """The fast path of a kernel that has none (yet): every call takes the checked path."""
    return False
