"""The launch fast path: `kernel[grid](args)` with plain arguments reaches the configured launcher
in one generated function, reading each pointer's address once.

For each kernel one function `launch` is generated from its parameters (the way layoutkit.ptx
writes one launcher per PTX signature) and run once per grid, in globals of that grid's own that
hold the grid and the specialization it launched last (FastLaunch.make_launch); `kernel[grid]`
returns the grid's function. When every argument is the common case, that function computes the
specialization key that `Kernel.key` would, from the same facts:

    pointer     an exact torch.Tensor of the annotated dtype      -> 16-byte aligned: data_ptr & 15
    tensor      an exact torch.Tensor of the annotated dtype      -> (aligned, narrow, extents'
                (its shape and stride() unpacked: a wrong rank       facts, strides' facts) as
                takes the checked path)                              in tensor_args.tensor_fact
    integer     an exact int in the annotated type's range        -> '1', '16', '+' or ''
    float       an exact float                                    -> None
    constexpr   any value (an unhashable one fails the lookup)    -> (type name, value)

ending in the debug flag (LAYOUTKIT_DEBUG read in two dict lookups where the kernel does not fix
it) and the grid, and looks it up among the launchers the checked path has remembered
(`FastLaunch.remember`, after a launch on torch's current stream of a specialization without
lk.assume facts and without a debug build's barrier-timeout sink, which is checked after each
launch). What it keeps for a specialization is, where it can, the configured launcher's
LaunchParts (layoutkit.ptx.launcher: its function, launch shape, a parameter buffer of its own and
the stream query): the function then tests the tensors' device, packs and calls cuLaunchKernel
itself, and it holds the last hit's facts, parts and packed values, so that a call with the
values its buffer holds computes no facts and packs nothing, and one with other values of the
same facts (each tested by identity) packs them without a lookup. Otherwise (a cluster, a
pointer alignment the key's facts do not imply) it holds and calls the configured launcher's
`from_pointers` entry with the arguments (a tensor followed by its extents and strides, the PTX
parameters it binds) and the pointers it read, which checks their tensor type, device and
alignment and launches; for a specialization
whose hidden parameters are TMA tensor maps, the entry in between (layoutkit.dsl.core.launch_maps)
takes the maps from their resolvers' caches (encoding a new address's or new extents') and
puts them in their places, or returns its MISS and the call goes on to the checked path.
Anything else (numpy arrays, another dtype, a bool, an explicit stream, a first launch) goes
through `Kernel.launch`, whose checks word every error: this path never decides that an argument
is wrong.

>>> from layoutkit.dsl.core.arguments import parameter
>>> from layoutkit.dsl.core.types import Pointer, f32, i32, constexpr
>>> params = [parameter("x", Pointer[f32]), parameter("n", i32), parameter("V", constexpr)]
>>> print(fast_launch_source(params, debug=None))
_lk_c0 = _lk_c1 = _lk_c2 = _lk_cD = _lk_cT = _lk_NO   # the facts of the specialization held
_lk_fn = _lk_g0 = _lk_g1 = _lk_g2 = _lk_g3 = _lk_g4 = _lk_g5 = _lk_g6 = _lk_launch = _lk_params = _lk_pack = _lk_storage = _lk_base = _lk_stream_of = _lk_ordinal = _lk_streams = _lk_add_stream = _lk_failed = _lk_aligns = _lk_one = _lk_from = _lk_last0 = _lk_last1 = _lk_entry = None
<BLANKLINE>
<BLANKLINE>
def _lk_make():
    _lk_busy = False   # a cell: set and cleared at every launch
<BLANKLINE>
    def launch(x=_lk_NO, n=_lk_NO, V=_lk_NO, /, *_lk_more, **_lk_kwargs):
        global _lk_c0, _lk_c1, _lk_c2, _lk_cD, _lk_cT, _lk_fn, _lk_g0, _lk_g1, _lk_g2, _lk_g3, _lk_g4, _lk_g5, _lk_g6, _lk_launch, _lk_params, _lk_pack, _lk_storage, _lk_base, _lk_stream_of, _lk_ordinal, _lk_streams, _lk_add_stream, _lk_failed, _lk_aligns, _lk_one, _lk_from, _lk_last0, _lk_last1, _lk_entry
        nonlocal _lk_busy
        if _lk_kwargs or _lk_more:
            _lk_stream = _lk_kwargs.pop('stream', None)
            if _lk_stream is not None or _lk_more:
                return _lk_other(_lk_grid, (x, n, V), _lk_more, _lk_stream, _lk_kwargs)
            try:
                if V is not _lk_NO:
                    x, n, V = _lk_bind(x, n, V, **_lk_kwargs)
                elif n is not _lk_NO:
                    x, n, V = _lk_bind(x, n, **_lk_kwargs)
                elif x is not _lk_NO:
                    x, n, V = _lk_bind(x, **_lk_kwargs)
                else:
                    x, n, V = _lk_bind(**_lk_kwargs)
            except TypeError:   # a name that is no parameter, given twice or missing
                return _lk_other(_lk_grid, (x, n, V), _lk_more, _lk_stream, _lk_kwargs)
        if not (_lk_type(x) is _lk_T and x.dtype is _lk_D0 and _lk_type(n) is _lk_int and V is not _lk_NO):
            return _lk_other(_lk_grid, (x, n, V), (), None, {})
        try:
            _lk_p0 = x.data_ptr()
            _lk_fD = _lk_os.environ._data.get(_lk_debug_key)
        except AttributeError:   # os.environ replaced
            return _lk_checked(_lk_grid, (x, n, V), None, {})
        if _lk_busy:   # another call of this function is launching
            return _lk_checked(_lk_grid, (x, n, V), None, {})
        _lk_busy = True
        try:
            if not (_lk_p0 == _lk_last0 and n == _lk_last1 and V is _lk_c2 and _lk_fD is _lk_cD and _lk_T is _lk_cT):   # other values than the last call's
                if not (-2147483648 <= n <= 2147483647):
                    return _lk_checked(_lk_grid, (x, n, V), None, {})
                _lk_f0 = not _lk_p0 & 15
                _lk_f1 = '1' if n == 1 else ('+' if n & 15 else '16') if n > 0 else ''
                _lk_f2 = (_lk_type(V).__name__, V)
                if not (_lk_f0 is _lk_c0 and _lk_f1 is _lk_c1 and V is _lk_c2 and _lk_fD is _lk_cD and _lk_T is _lk_cT):
                    try:
                        _lk_e = _lk_launchers.get((_lk_f0, _lk_f1, _lk_f2, _lk_flags.get(_lk_fD), _lk_grid))
                    except TypeError:   # an unhashable constexpr
                        _lk_e = None
                    if _lk_type(_lk_e) is _lk_Parts:
                        _lk_fn, _lk_g0, _lk_g1, _lk_g2, _lk_g3, _lk_g4, _lk_g5, _lk_g6, _lk_launch, _lk_params, _lk_pack, _lk_storage, _lk_base, _lk_stream_of, _lk_ordinal, _lk_streams, _lk_add_stream, _lk_failed, _lk_cT, _lk_aligns, _lk_one, _lk_from = _lk_e
                        _lk_entry = None
                    elif _lk_e is None:
                        return _lk_checked(_lk_grid, (x, n, V), None, {})
                    else:   # a from_pointers launcher or a tensor-map entry, which packs and launches
                        _lk_entry, _lk_cT = _lk_e, _lk_T
                    _lk_c0, _lk_c1, _lk_c2, _lk_cD = _lk_f0, _lk_f1, V, _lk_fD
                _lk_last0 = None   # the buffer is in doubt until the pack below completes
                if _lk_entry is None:
                    try:
                        _lk_pack(_lk_storage, _lk_base, _lk_p0, n)
                    except _lk_PACK_ERRORS:
                        return _lk_checked(_lk_grid, (x, n, V), None, {})
                _lk_last0, _lk_last1 = _lk_p0, n
            if _lk_entry is not None:
                if _lk_entry(x, n, _lk_p0) is None:
                    return None
                return _lk_checked(_lk_grid, (x, n, V), None, {})
            if (x.is_cuda) if _lk_one else (x.get_device() == _lk_ordinal):
                _lk_raw = _lk_stream_of(_lk_ordinal)
                try:
                    _lk_s = _lk_streams[_lk_raw]
                except KeyError:
                    _lk_s = _lk_add_stream(_lk_raw)
                _lk_err = _lk_launch(_lk_fn, _lk_g0, _lk_g1, _lk_g2, _lk_g3, _lk_g4, _lk_g5, _lk_g6, _lk_s, _lk_params, 0)[0]
                if _lk_err:
                    _lk_failed(_lk_err, _lk_s)
                return None
        finally:
            _lk_busy = False
        return _lk_other(_lk_grid, (x, n, V), (), None, {})
    return launch
"""
from __future__ import annotations

import builtins
import os
import sys

from layoutkit.ptx import debug_raw_lookup
from layoutkit.ptx.code_cache import compiled
from layoutkit.ptx.fastpath import NeverATensor
from layoutkit.ptx.launcher import PACK_ERRORS, LaunchParts, gil_guards_launches, launch_lines

from .arguments import INT_RANGE, Parameter
from .tensor_args import NARROW_LIMIT, STRIDE_BYTES
from .types import HOST_NAMES, DType

__all__ = ["FastLaunch", "bind_source", "fast_launch_source", "plain_grid", "torch_module"]

PREFIX = "_lk_"   # the generated code's own names; a kernel parameter may not start with it
MAX_REMEMBERED = 256   # launchers a kernel's fast path keeps (one per specialization and grid)


def plain_grid(grid) -> bool:
    """Whether `grid` is an exact int or a tuple of 1-3 exact ints: the grids the fast path takes
    (1.0 == 1 and True == 1 as dict keys; those grids go through the checked path). Written out
    per length: `kernel[x, y]` asks it at every launch."""
    if type(grid) is int:
        return True
    if type(grid) is not tuple:
        return False
    n = len(grid)
    if n == 2:
        return type(grid[0]) is int and type(grid[1]) is int
    if n == 3:
        return type(grid[0]) is int and type(grid[1]) is int and type(grid[2]) is int
    return n == 1 and type(grid[0]) is int


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


def fast_launch_source(params: list[Parameter], debug: bool | None,
                       relaxed: dict | None = None, hold_entries: bool = True) -> str:
    """The source of `_lk_make()`, which returns `launch(<the kernel's parameters>)`, and its
    held state (see the module docstring), which FastLaunch.make_launch runs once per grid, in
    globals of the grid's own (`_lk_grid` and the held state) whose builtins are the kernel's
    namespace; the busy flag, written twice per launch, is launch's one closure cell (a cell's
    store is cheaper than a global's, and one cell costs next to nothing per call). `debug`: the
    kernel's fixed debug flag, or None to read LAYOUTKIT_DEBUG at each launch. `relaxed`: the
    kernel's do_not_specialize facts (layoutkit.dsl.core.nospec.relaxed_facts), computed as its
    key has them (an integer: '+' or ''; a tensor extent: '+'). `hold_entries`: hold a launcher
    entry as the parts are held (False on free-threaded builds, where the busy flag guards
    nothing: an entry is then looked up at every call, and LaunchParts never come). The
    namespace: _lk_T (torch.Tensor),
    _lk_D<i> (torch dtype of pointer i), _lk_launchers (fast key -> LaunchParts, or a
    from_pointers launcher), _lk_Parts (LaunchParts), _lk_PACK_ERRORS, _lk_checked(grid, args,
    stream, kwargs) (Kernel.launch), _lk_NO (the default of an argument not given), _lk_bind
    (see bind_source), _lk_other (see other_call), _lk_flags/_lk_os/_lk_debug_key (see
    layoutkit.ptx.debug_raw_lookup), _lk_type, _lk_int, _lk_float.

    The parameters are positional-only with the default _lk_NO, so that a complete positional
    call binds in Python's own call; keywords and surplus arguments take the first branch
    (keywords bound by _lk_bind, then the same checks; a stream, a surplus argument or a bad
    name: _lk_other), a missing argument fails the type tests and ends in _lk_other. The held
    state is the specialization last launched: its LaunchParts (or `_lk_entry`, the launcher
    entry of one the function does not launch itself), facts (`_lk_c<j>`, `_lk_cD`, `_lk_cT`)
    and the last call's values (`_lk_last<j>`, what the parts' buffer holds; ints compared by
    value, floats by identity, as the configured launcher does). A call with those values (and
    the same debug value and tensor type) launches at once; other values have their facts
    computed, a lookup of `_lk_launchers` where they are not the held ones (with the parsed
    debug flag and the grid, the checked key's form), and are packed."""
    names = [_local(i, p) for i, p in enumerate(params)]
    checks, ranges, reads, pointers, runtime = [], [], [], [], []
    facts, tests, key, packed = [], [], [], []     # fact lines, fact tests, key items, packed
    for i, p in enumerate(params):
        a = names[i]
        if p.kind == "constexpr":
            facts.append(f"_lk_f{i} = (_lk_type({a}).__name__, {a})")
            tests.append((f"{a} is _lk_c{i}", a))   # the same object (an equal one: the lookup)
            key.append(f"_lk_f{i}")
            continue
        runtime.append(a)
        if p.kind == "tensor":
            tensor = _tensor_code(i, p, (relaxed or {}).get(i, ()))
            checks += [f"_lk_type({a}) is _lk_T", f"{a}.dtype is _lk_D{i}"]
            reads += [f"_lk_p{i} = {a}.data_ptr()", *tensor[0]]
            pointers.append(f"_lk_p{i}")
            facts.append(f"_lk_f{i} = {tensor[1]}")
            tests.append((f"_lk_f{i} == _lk_c{i}", f"_lk_f{i}"))
            runtime.extend(tensor[2])
            packed += [f"_lk_p{i}"] + tensor[2]
        elif p.kind == "pointer":
            checks += [f"_lk_type({a}) is _lk_T", f"{a}.dtype is _lk_D{i}"]
            reads.append(f"_lk_p{i} = {a}.data_ptr()")
            pointers.append(f"_lk_p{i}")
            facts.append(f"_lk_f{i} = not _lk_p{i} & 15")
            tests.append((f"_lk_f{i} is _lk_c{i}", f"_lk_f{i}"))
            packed.append(f"_lk_p{i}")
        elif p.annotation.is_int:
            lo, hi = INT_RANGE[p.annotation.name]
            checks.append(f"_lk_type({a}) is _lk_int")
            ranges.append(f"{lo} <= {a} <= {hi}")
            facts.append(f"_lk_f{i} = " + (
                f"'+' if {a} > 0 else ''" if i in (relaxed or {}) else
                f"'1' if {a} == 1 else ('+' if {a} & 15 else '16') if {a} > 0 else ''"))
            tests.append((f"_lk_f{i} is _lk_c{i}", f"_lk_f{i}"))
            packed.append(a)
        else:
            checks.append(f"_lk_type({a}) is _lk_float")
            key.append("None")
            packed.append(a)
            continue
        key.append(f"_lk_f{i}")
    if params and params[-1].kind == "constexpr":
        checks.append(f"{names[-1]} is not _lk_NO")     # (given, then so is every one before it)
    unpacked = [f"{a} is _lk_c{i}" for i, (p, a) in enumerate(zip(params, names))
                if p.kind == "constexpr"]     # held facts that are no packed value
    if debug is None:
        reads.append("_lk_fD = _lk_os.environ._data.get(_lk_debug_key)")
        tests.append(("_lk_fD is _lk_cD", "_lk_fD"))
        unpacked.append("_lk_fD is _lk_cD")
        key.append("_lk_flags.get(_lk_fD)")
    else:
        key.append(repr(debug))
    key.append("_lk_grid")
    held_facts = [t.split()[-1] for t, _ in tests]       # _lk_c<j>, _lk_cD
    fact_values = [value for _, value in tests]
    floats = {names[i] for i, p in enumerate(params)
              if p.kind not in ("constexpr", "tensor", "pointer") and not p.annotation.is_int}
    lasts = [f"_lk_last{j}" for j in range(len(packed))]
    dims = [f"_lk_g{j}" for j in range(7)]     # grid, block, dynamic shared bytes
    given = f"({', '.join(names)}{',' if len(names) == 1 else ''})"
    checked = f"return _lk_checked(_lk_grid, {given}, None, {{}})"
    tensors = [names[i] for i, p in enumerate(params) if p.kind in ("pointer", "tensor")]
    one_device = " and ".join(f"{t}.is_cuda" for t in tensors)      # the launcher saw one device
    on_ordinal = " and ".join(f"{t}.get_device() == _lk_ordinal" for t in tensors)
    device = f"({one_device}) if _lk_one else ({on_ordinal})" if tensors else "True"
    same = [f"{v} {'is' if v in floats else '=='} {last}" for v, last in zip(packed, lasts)]
    same += unpacked + ["_lk_T is _lk_cT"]
    lookup = [
        f"if not ({' and '.join([t for t, _ in tests] + ['_lk_T is _lk_cT'])}):",
        "    try:",
        f"        _lk_e = _lk_launchers.get(({', '.join(key)}))",
        "    except TypeError:   # an unhashable constexpr",
        "        _lk_e = None",
        "    if _lk_type(_lk_e) is _lk_Parts:",
        f"        {', '.join(PARTS)} = _lk_e",
        "        _lk_entry = None",
        "    elif _lk_e is None:",
        f"        {checked}",
        "    else:   # a from_pointers launcher or a tensor-map entry, which packs and launches",
        *(["        _lk_entry, _lk_cT = _lk_e, _lk_T"] if hold_entries else [
            f"        if _lk_e({', '.join(runtime + pointers)}) is None:",
            "            return None",
            f"        {checked}"]),
        *([f"    {', '.join(held_facts)} = {', '.join(fact_values)}"] if held_facts else [])]
    pack = [f"{lasts[0]} = None   # the buffer is in doubt until the pack below completes",
            "if _lk_entry is None:",
            "    try:",
            f"        _lk_pack(_lk_storage, _lk_base, {', '.join(packed)})",
            "    except _lk_PACK_ERRORS:",
            f"        {checked}",
            f"{', '.join(lasts)} = {', '.join(packed)}"] if packed else []
    other_values = ([f"if not ({' and '.join(ranges)}):", f"    {checked}"] if ranges else []) + \
        facts + lookup + pack
    launch = [
        f"if not ({' and '.join(same)}):   # other values than the last call's",
        *["    " + line for line in other_values],
        "if _lk_entry is not None:",
        f"    if _lk_entry({', '.join(runtime + pointers)}) is None:",
        "        return None",
        f"    {checked}",
        f"if {device}:",
        *"\n".join(launch_lines(False, "torch", "_lk_ordinal", "_lk_", dims)).splitlines(),
        "    return None"]
    has_tensors = any(p.kind == "tensor" for p in params)
    errors = {name: why for name, why, where in (
        ("AttributeError", "os.environ replaced", debug is None),
        ("ValueError", "a tensor of another rank", has_tensors)) if where}
    caught = next(iter(errors)) if len(errors) == 1 else f"({', '.join(errors)})"
    body = (["try:"] + ["    " + line for line in reads] +
            [f"except {caught}:   # {'; '.join(errors.values())}", f"    {checked}"]
            if errors else reads) + [
        "if _lk_busy:   # another call of this function is launching",
        f"    {checked}",
        "_lk_busy = True",
        "try:"] + ["    " + line for line in launch] + [
        "finally:",
        "    _lk_busy = False"]
    other = f"return _lk_other(_lk_grid, {given}, (), None, {{}})"
    if checks:   # tested first with an early return: short jumps on the common path
        body = [f"if not ({' and '.join(checks)}):", f"    {other}"] + body
    signature = "".join(f"{a}=_lk_NO, " for a in names) + ("/, " if names else "")
    facts_held = held_facts + ["_lk_cT"]
    parts = [c for c in PARTS if c != "_lk_cT"]
    lines = [f"{' = '.join(facts_held)} = _lk_NO   # the facts of the specialization held",
             f"{' = '.join(parts + lasts + ['_lk_entry'])} = None",
             "",
             "",
             "def _lk_make():",
             "    _lk_busy = False   # a cell: set and cleared at every launch",
             "",
             f"    def launch({signature}*_lk_more, **_lk_kwargs):",
             f"        global {', '.join(facts_held + parts + lasts + ['_lk_entry'])}",
             "        nonlocal _lk_busy",
             "        if _lk_kwargs or _lk_more:"]
    lines += ["            " + line for line in _keyword_lines(names, given)]
    lines += ["        " + line for line in body]
    lines += [f"        {other}", "    return launch"]
    return "\n".join(lines)


# The held LaunchParts' fields, in LaunchParts' order, as the generated function's globals.
PARTS = ("_lk_fn", "_lk_g0", "_lk_g1", "_lk_g2", "_lk_g3", "_lk_g4", "_lk_g5", "_lk_g6",
         "_lk_launch", "_lk_params", "_lk_pack", "_lk_storage", "_lk_base", "_lk_stream_of",
         "_lk_ordinal", "_lk_streams", "_lk_add_stream", "_lk_failed", "_lk_cT", "_lk_aligns", "_lk_one",
         "_lk_from")



def _local(i: int, p: Parameter) -> str:
    """The name parameter i has in the generated function: its own, but for one named like the
    launch function's keyword `stream`."""
    return p.name if p.name != "stream" else f"{PREFIX}arg{i}"


def _keyword_lines(names: list[str], given: str) -> list[str]:
    """The first branch of the generated function (fast_launch_source), for a call with keywords
    or surplus arguments: a stream (one that is not None) or a surplus argument goes to
    `_lk_other`; other keywords are bound in Python's own call of `_lk_bind` (the positional
    arguments given, up to the first _lk_NO, then the keywords) and the call goes on; a name that
    is no parameter, given twice or missing goes to `_lk_other`."""
    other = f"return _lk_other(_lk_grid, {given}, _lk_more, _lk_stream, _lk_kwargs)"
    lines = ["_lk_stream = _lk_kwargs.pop('stream', None)",
             "if _lk_stream is not None or _lk_more:", f"    {other}", "try:"]
    target = f"{given[1:-1]} = " if names else ""
    for count in range(len(names), 0, -1):
        lines.append(f"    {'if' if count == len(names) else 'elif'} {names[count - 1]} is not _lk_NO:")
        lines.append(f"        {target}_lk_bind({', '.join(names[:count])}, **_lk_kwargs)")
    lines += (["    else:", f"        {target}_lk_bind(**_lk_kwargs)"] if names else
              ["    _lk_bind(**_lk_kwargs)"])
    lines += ["except TypeError:   # a name that is no parameter, given twice or missing",
              f"    {other}"]
    return lines


def bind_source(params: list[Parameter]) -> str:
    """The source of `_lk_bind(<the kernel's parameters>)`, which returns them as a tuple:
    Python's own binding of positional and keyword arguments."""
    names = ", ".join(p.name for p in params)
    return f"def _lk_bind({names}):\n    return ({names}{',' if len(params) == 1 else ''})"


def other_call(checked):
    """`_lk_other(grid, given, more, stream, kwargs)`: the checked path `checked(grid, args,
    stream, kwargs)` (which words every error) for a call the generated function does not bind:
    the positional arguments are `given` up to its first NO, then `more`."""
    def other(grid, given, more, stream, kwargs):
        count = len(given)
        while count and given[count - 1] is NO:
            count -= 1
        return checked(grid, given[:count] + more, stream, kwargs)
    return other


class _Unfilled:
    """The default of the generated function's parameters: an argument the call did not give."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no argument>"


NO = _Unfilled()


def _tensor_code(i: int, p: Parameter, relaxed=()) -> tuple[list[str], str, list[str]]:
    """(lines unpacking tensor parameter i's shape and strides, its fact expression, the names
    the launcher takes after the tensor): the checked path's tensor_fact on exact ints, the
    extents of modes `relaxed` (do_not_specialize) '+' whatever their divisibility."""
    rank, a = p.annotation.rank, p.name
    shape = [f"_lk_s{i}_{d}" for d in range(rank)]
    strides = [f"_lk_t{i}_{d}" for d in range(rank)]
    lines = [f"{', '.join(shape)}{',' if rank == 1 else ''} = {a}.shape",
             f"{', '.join(strides)}{',' if rank == 1 else ''} = {a}.stride()"]
    mask = STRIDE_BYTES // p.annotation.dtype.nbytes - 1
    span = " + ".join(f"({n} - 1) * {t}" for n, t in zip(shape, strides))
    narrow = f"not ({' | '.join(shape + strides)} | ({span})) >> {NARROW_LIMIT.bit_length() - 1}"
    # a torch tensor's extents and strides are never negative: 0 is the only other case (an
    # empty mode: '' is in no key, so the checked path refuses it; a broadcast stride: '0')
    extent = [f"'+' if {n} else ''" if d in relaxed else f"'+' if {n} & 15 else ('16' if {n} else '')"
              for d, n in enumerate(shape)]
    stride = [f"'1' if {t} == 1 else ('+' if {t} & {mask} else ('16' if {t} else '0'))"
              for t in strides]
    fact = f"(not _lk_p{i} & 15, {narrow}, {', '.join(f'({x})' for x in extent + stride)})"
    return lines, fact, shape + strides


class FastLaunch:
    """One kernel's fast path: `make(grid)` is the function `kernel[grid]` returns (None where
    the kernel can have none: a parameter named like the generated code's own names, or a
    kernel following LAYOUTKIT_DEBUG where os.environ keeps no encoded keys); `remember` adds a
    launcher after a checked launch. `checked(grid, args, stream, kwargs)` launches through the
    checked path. Pointers take the fast path once torch is imported and names every pointer
    dtype of the kernel."""

    def __init__(self, name: str, params: list[Parameter], debug: bool | None, checked,
                 relaxed: dict | None = None):
        self.params, self.launchers, self.torch_tensor = params, {}, None
        self.make = None
        if any(p.name.startswith(PREFIX) for p in params):
            return
        lookup = debug_raw_lookup()
        if debug is None and lookup is None:   # no encoded environment: only the checked path
            return
        self.namespace = {**vars(builtins), "__name__": __name__,
                          "_lk_T": NeverATensor, "_lk_launchers": self.launchers, "_lk_checked": checked,
                          "_lk_type": type, "_lk_int": int, "_lk_float": float, "_lk_NO": NO,
                          "_lk_Parts": LaunchParts, "_lk_PACK_ERRORS": PACK_ERRORS,
                          "_lk_os": os, "_lk_debug_key": lookup and lookup[0], "_lk_flags": lookup and lookup[1]}
        exec(compiled(bind_source(params), f"<layoutkit bind of {name}>"), self.namespace)
        self.namespace["_lk_other"] = other_call(checked)
        self.code = compiled(fast_launch_source(params, debug, relaxed, gil_guards_launches()),
                             f"<layoutkit fast launch of {name}>")
        self.make = self.make_launch

    def make_launch(self, grid):
        """The function `kernel[grid]` returns: the generated code run in globals of its own (the
        grid and the held state; its frames' module is layoutkit's, not the user's) whose
        builtins are the kernel's namespace, so that the state costs no closure per call (but
        the busy flag's one cell)."""
        held = {"__builtins__": self.namespace, "__name__": __name__, "_lk_grid": grid}
        exec(self.code, held)
        return held["_lk_make"]()

    def bind_torch(self, torch) -> None:
        """Let tensors of `torch` (the imported module) take the fast path, where it names every
        pointer dtype of the kernel."""
        self.torch_tensor = torch.Tensor
        self.launchers.clear()   # launchers bound to another torch's tensor type and stream query
        if self.make is None:
            return
        dtypes = torch_dtypes(torch)
        pointers = {i: p.annotation.dtype for i, p in enumerate(self.params)
                    if p.kind in ("pointer", "tensor")}
        if all(d in dtypes for d in pointers.values()):
            self.namespace.update({f"_lk_D{i}": dtypes[d] for i, d in pointers.items()})
            self.namespace["_lk_T"] = torch.Tensor

    def remember(self, key: tuple, grid, launcher, hidden=None) -> None:
        """Keep `launcher` (configured for `grid`, of the specialization of `key`, a checked key
        ending in KernelOptions) for calls whose fast key matches. `hidden`: the specialization
        when it has hidden parameters (tensor maps: launch_maps.hidden_entry, made once per
        fast key; any other kind: None is kept, which the fast path reads as a miss)."""
        torch = torch_module()
        if torch is not None and torch.Tensor is not self.torch_tensor:   # torch came (or changed)
            self.bind_torch(torch)
        entry = getattr(launcher, "from_pointers", None)
        if self.make is None or entry is None or not plain_grid(grid):
            return
        fast_key = key[:-1] + (key[-1].debug, grid)
        if hidden is not None:
            if fast_key in self.launchers:
                return
            from .launch_maps import hidden_entry
            entry = hidden_entry(self.params, hidden, entry)   # None: kept, a checked launch
        else:
            held = self.launchers.get(fast_key)
            if isinstance(held, LaunchParts) and held.launcher is launcher:
                return                       # (a checked launch of a remembered specialization)
            entry = self.launch_parts(fast_key, launcher) or entry
        if len(self.launchers) >= MAX_REMEMBERED:
            self.launchers.clear()
        self.launchers[fast_key] = entry

    def launch_parts(self, fast_key: tuple, launcher) -> LaunchParts | None:
        """The launcher's LaunchParts for the generated function to launch in place, where its
        rules are the ones that function tests: pointers of this torch's tensor type and every
        alignment the PTX requires implied by the key's 16-byte facts (else None: it calls
        from_pointers, which tests them)."""
        make = getattr(launcher, "launch_parts", None)
        parts = make() if make is not None else None
        if parts is None or parts.tensor_type is not self.torch_tensor:
            return None
        aligned = [fast_key[i] if p.kind == "pointer" else fast_key[i][0]
                   for i, p in enumerate(self.params) if p.kind in ("pointer", "tensor")]
        if len(aligned) != len(parts.pointer_aligns) or any(
                align > 16 or (align > 1 and not fact)
                for align, fact in zip(parts.pointer_aligns, aligned)):
            return None
        return parts

