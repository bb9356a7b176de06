"""Configured launchers: a launch shape checked once, then launches that take only the kernel's arguments.

``launcher = kernel.configure(grid, block, smem_bytes=0, stream=None, cluster=None, device=None)``
checks the shape against the kernel loaded on ``device`` (default: the current device) and returns a
function; ``launcher(*args)`` then does what ``kernel.launch(*args, grid=grid, block=block, ...)``
does: the same device and stream choice, the same argument checks, the same errors, except that a
wrong number of arguments is refused by Python's own call (a TypeError naming the launcher and the
missing parameter or the count), which costs nothing per call.

Its common case runs as one function generated for the signature, whose positional parameters are
the kernel's (checks shared with layoutkit.ptx.fastpath): every pointer argument an exact torch
tensor on the configured device, every integer an exact ``int`` (range-checked by
``struct.pack_into``), every float an exact ``float``, every tensor map a TensorMap, and no other
call of the same launcher in progress (another thread's, or a re-entrant one). The launcher owns
one parameter buffer and remembers what it last packed into it: a value equal to the remembered
one (the same int, the same float or bytes object) is not written again, and a pointer equal to
the remembered one is not tested for alignment again (it passed before it was packed). Any other call goes
through ``kernel.launch`` (with its thread's own buffer), so arguments on another device,
DeviceBuffers, numpy integers or concurrent calls still launch correctly, only slower, and every
error a user can cause is worded there.

``launcher.from_pointers`` (None for a signature with by-value byte arrays or untyped 64-bit
parameters) is the same launch for a caller that has already checked every argument's exact type
(as the launcher's first test does) and read every pointer argument's ``data_ptr()``: it takes the
arguments followed by those pointers, in parameter order, and checks the pointers' tensor type
(the launcher's own: one configured before torch was imported learns it at its first checked
call), devices and alignment. The DSL's ``kernel[grid](...)`` launches through it, having read
the pointers for its specialization key.

``launcher.launch_parts()`` (None where the launcher has a cluster, a fixed stream, a free-threaded
guard or a parameter other than a pointer, int or float) returns its launch in parts
(:class:`LaunchParts`: the loaded function, the launch shape, a parameter buffer of the caller's own,
the stream query), for generated code that tests the arguments itself and calls the driver without
a second Python call (the DSL's ``kernel[grid]``, layoutkit.dsl.core.launch_fast).

>>> from layoutkit.ptx.signature import parse_entry
>>> from layoutkit.ptx.arguments import ArgumentPacker
>>> sig = parse_entry(".entry k(.param .u64 .ptr.align 16 x, .param .u32 n) { ret; }")
>>> print(launcher_source(ArgumentPacker(sig), cluster=False, stream="torch", ordinal=0, names=["x", "n"],
...                       only_device=True, from_pointers=True))
def make_launcher():
    last0 = last1 = None
    busy = False
<BLANKLINE>
    def launcher(x, n, /):
        nonlocal busy, last0, last1
        if busy:
            return general((x, n))
        busy = True
        try:
            if type(x) is not T or type(n) is not int or not x.is_cuda:
                return general((x, n))
            p0 = x.data_ptr()
            if not (p0 == last0 and n == last1):
                if p0 % 16:
                    return general((x, n))
                last0 = None  # the buffer is in doubt until the pack below completes
                try:
                    pack_into(storage, base, p0, n)
                except PACK_ERRORS:
                    return general((x, n))
                last0, last1 = p0, n
            raw = stream_of(0)
            try:
                s = streams[raw]
            except KeyError:
                s = add_stream(raw)
            err = launch(fn, gx, gy, gz, bx, by, bz, smem, s, params, 0)[0]
            if err:
                failed(err, s)
        finally:
            busy = False
<BLANKLINE>
    def launcher_from_pointers(x, n, p0, /):
        nonlocal busy, last0, last1
        if busy:
            return general((x, n))
        busy = True
        try:
            if type(x) is not T or not x.is_cuda:
                return general((x, n))
            if not (p0 == last0 and n == last1):
                if p0 % 16:
                    return general((x, n))
                last0 = None  # the buffer is in doubt until the pack below completes
                try:
                    pack_into(storage, base, p0, n)
                except PACK_ERRORS:
                    return general((x, n))
                last0, last1 = p0, n
            raw = stream_of(0)
            try:
                s = streams[raw]
            except KeyError:
                s = add_stream(raw)
            err = launch(fn, gx, gy, gz, bx, by, bz, smem, s, params, 0)[0]
            if err:
                failed(err, s)
        finally:
            busy = False
    return launcher, launcher_from_pointers
"""
from __future__ import annotations

import builtins
import keyword
import struct
import sys
import threading
from typing import NamedTuple

from . import driver
from .arguments import ArgumentPacker, torch_tensor_type
from .fastpath import NeverATensor, argument_checks, compile_function, fast_namespace
from .launch import _stream_handle, launch_dims, torch_stream_getter
from .signature import ParamKind

__all__ = ["DIMS", "LaunchParts", "PACK_ERRORS", "configured_launcher", "launch_lines", "launcher_source"]

# What pack_into raises for an exact int or float its format cannot hold; the checked path words it.
PACK_ERRORS = (struct.error, OverflowError)

# The parameter kinds of signatures that get a from_pointers entry (an INT_OR_POINTER argument may be
# either; by-value byte arrays always take the checked path).
_FROM_POINTERS_KINDS = (ParamKind.POINTER, ParamKind.INT, ParamKind.FLOAT, ParamKind.TENSORMAP)

# The launch shape's names in the generated launcher's namespace (grid, block, dynamic shared bytes).
DIMS = ("gx", "gy", "gz", "bx", "by", "bz", "smem")

# Names the generated code uses besides the namespace's: a kernel parameter named like one of
# these (or a builtin) gets the positional name argN instead.
_GENERATED_LOCALS = {"busy", "d", "raw", "s", "err", "make_launcher", "launcher", "launcher_from_pointers"}
_BUILTIN_NAMES = frozenset(dir(builtins))


def parameter_names(params, namespace_names) -> list[str]:
    """The launcher's positional parameter names: each kernel parameter's PTX name where it is a
    Python identifier no generated name or builtin shadows, else ``argN`` (N: its position)."""
    taken = set(namespace_names) | _GENERATED_LOCALS | _BUILTIN_NAMES
    taken |= {f"{t}{i}" for i in range(len(params)) for t in ("p", "m", "e", "last")}  # temporaries, cells
    names = []
    for i, p in enumerate(params):
        name = p.name
        if not name.isidentifier() or keyword.iskeyword(name) or name in taken:
            name = f"arg{i}"
            while name in taken or any(q.name == name for q in params):
                name += "_"
        taken.add(name)
        names.append(name)
    return names


def only_visible_device() -> bool:
    """Whether the process sees exactly one CUDA device (False where the driver cannot say: the
    launcher then checks each tensor's device ordinal, which is right for any count)."""
    try:
        return driver.device_count() == 1
    except driver.DriverUnavailableError:
        return False


def gil_guards_launches() -> bool:
    """Whether the GIL serialises the generated launchers' bytecode (False on free-threaded builds)."""
    is_gil_enabled = getattr(sys, "_is_gil_enabled", None)
    return is_gil_enabled is None or is_gil_enabled()


def launcher_source(packer: ArgumentPacker, cluster: bool, stream: str, ordinal: int = 0,
                    names: list[str] | None = None, guard: str = "busy", only_device: bool = False,
                    from_pointers: bool = False) -> str:
    """The source of ``make_launcher()``, which returns the generated launcher for ``packer``'s
    signature (positional parameters ``names``, default ``a0, a1, ...``) and, with
    ``from_pointers``, its second entry (else None; see the module docstring).

    The launch shape is the namespace's (``DIMS``: grid x, y, z, block x, y, z, dynamic shared
    bytes), so that the source, compiled once (fastpath.compile_function), serves every grid;
    ``cluster``: launch through ``cuLaunchKernelEx`` with the namespace's ``config``;
    ``stream``: "fixed" (the namespace's ``s``) or "torch" (PyTorch's current stream on ``ordinal``);
    ``guard``: how a call makes sure that no other call writes the launcher's parameter buffer
    between its packing and the driver's copy of it: "busy" (a flag tested and set with no call in
    between, so that under the GIL no other thread runs in between, and cleared when the launch
    returns) or "owner" (only the configuring thread's calls take the fast path; for free-threaded
    builds, where nothing is atomic without a lock);
    ``only_device``: ``ordinal`` is the only device the process sees (a tensor's ``is_cuda`` then
    names it).
    """
    n = len(packer.params)
    names = names or [f"a{i}" for i in range(n)]
    miss = f"return general(({', '.join(names)}{',' if n == 1 else ''}))"
    launch = launch_lines(cluster, stream, ordinal)
    entries = [("launcher", names, False)]
    if from_pointers:
        pointers = [f"p{i}" for i, p in enumerate(packer.params) if p.kind is ParamKind.POINTER]
        entries.append(("launcher_from_pointers", names + pointers, True))
    lasts = [f"last{i}" for i in range(n)]   # what each parameter was last packed as
    lines = ["def make_launcher():"]
    for function, parameters, pointers_read in entries:
        checks, values = argument_checks(packer.params, miss, on_device=str(ordinal), names=names,
                                         only_device=only_device, pointers_read=pointers_read)
        checks, aligns = _alignment_deferred(packer.params, checks, miss)
        body = checks + _pack_lines(packer.params, values, lasts, miss, aligns) + launch
        signature = f"    def {function}({', '.join(parameters)}{', /' if parameters else ''}):"
        if guard == "busy":
            lines += ["", signature, f"        nonlocal {', '.join(['busy'] + lasts)}",
                      f"        if busy:\n            {miss}", "        busy = True", "        try:"]
            lines += _indented(body, "        ") + ["        finally:", "            busy = False"]
        else:
            lines += ["", signature] + ([f"        nonlocal {', '.join(lasts)}"] if lasts else [])
            lines += [f"        if get_ident() != owner:\n            {miss}"] + _indented(body, "    ")
    state = ([f"    {' = '.join(lasts)} = None"] if lasts else []) + (["    busy = False"] if guard == "busy" else [])
    second = "launcher_from_pointers" if from_pointers else "None"
    return "\n".join(lines[:1] + state + lines[1:] + [f"    return launcher, {second}"])


def _alignment_deferred(params, checks: list[str], miss: str) -> tuple[list[str], list[str]]:
    """(checks without their pointer-alignment tests, those tests' conditions): the launcher
    tests a pointer's alignment only where it is not the value last packed (which passed them),
    so that a launch with the held values does no modulo of a 64-bit address."""
    aligns = [f"p{i} % {p.pointer_align}" for i, p in enumerate(params)
              if p.kind is ParamKind.POINTER and p.pointer_align > 1]
    tests = {f"    if {a}:\n        {miss}" for a in aligns}
    kept = [c for c in checks if c not in tests]
    if len(kept) != len(checks) - len(tests):     # argument_checks wrote them otherwise
        return checks, []
    return kept, aligns


def _pack_lines(params, values: list[str], lasts: list[str], miss: str, aligns=()) -> list[str]:
    """Pack ``values`` unless the buffer already holds them: each is compared with what it was last
    packed as (``lasts``), an int by value (same value, same bytes), a float or bytes by identity
    (equal floats can differ in bytes: 0.0 and -0.0). ``aligns``: conditions that leave for the
    checked path, tested before a pack (a value equal to the last packed one passed them)."""
    if not values:
        return []
    same = [f"{v} {'is' if p.kind is ParamKind.FLOAT or p.is_array else '=='} {last}"
            for p, v, last in zip(params, values, lasts)]
    return [f"    if not ({' and '.join(same)}):",
            *([f"        if {' or '.join(aligns)}:\n            {miss}"] if aligns else []),
            f"        {lasts[0]} = None  # the buffer is in doubt until the pack below completes",
            f"        try:\n            pack_into(storage, base, {', '.join(values)})",
            f"        except PACK_ERRORS:\n            {miss}",
            f"        {', '.join(lasts)} = {', '.join(values)}"]


def launch_lines(cluster: bool, stream: str, ordinal, prefix: str = "", dims=DIMS) -> list[str]:
    """The stream choice (one query of PyTorch's current stream) and the driver call, each line
    indented by 4; every name the lines use carries ``prefix`` (the DSL's fast path writes the
    same lines into its own function: layoutkit.dsl.core.launch_fast); ``ordinal``: the device's
    ordinal or the name holding it; ``dims``: the names of the launch shape."""
    p = prefix
    lines = []
    if stream == "torch":
        lines.append(f"    {p}raw = {p}stream_of({ordinal})\n    try:\n        {p}s = {p}streams[{p}raw]\n"
                     f"    except KeyError:\n        {p}s = {p}add_stream({p}raw)")
    if cluster:
        lines.append(f"    {p}config.hStream = {p}s\n    {p}err = {p}launch_ex({p}config, {p}fn, {p}params, 0)[0]")
    else:
        lines.append(f"    {p}err = {p}launch({p}fn, {', '.join(dims)}, {p}s, {p}params, 0)[0]")
    return lines + [f"    if {p}err:\n        {p}failed({p}err, {p}s)"]


def _indented(chunks: list[str], prefix: str) -> list[str]:
    return [prefix + line for chunk in chunks for line in chunk.split("\n")]


def configured_launcher(kernel, grid, block, smem_bytes: int = 0, stream=None, cluster=None,
                        device: int | None = None):
    """``kernel.configure(...)``: see the module docstring. Raises LaunchConfigError for a shape the
    kernel cannot run on ``device`` and for a ``stream`` that is no stream."""
    ordinal = device if device is not None else driver.current_device().ordinal
    fn = kernel.function(ordinal)
    dims, config = kernel._launch_plan(fn, grid, block, smem_bytes, cluster)
    grid, block = dims[:3], dims[3:6]
    cluster = None if cluster is None else launch_dims("cluster", cluster)
    raw_stream = None if stream is None else _stream_handle(stream)
    packer = ArgumentPacker(kernel.signature)
    has_pointers = packer.has_pointers
    streams = kernel._streams
    cu = driver.bindings()

    def add_stream(raw: int):
        handle = streams[raw] = cu.CUstream(raw)
        return handle

    def general(args: tuple):
        """Every call the generated code does not take: kernel.launch with the configured shape."""
        if namespace["T"] is NeverATensor and torch_tensor_type() is not None:
            namespace["T"], namespace["stream_of"] = torch_tensor_type(), torch_stream_getter()
        kernel.launch(*args, grid=grid, block=block, smem_bytes=smem_bytes, stream=raw_stream, cluster=cluster)

    def failed(err, s):
        kernel._launch_failed(err, fn, (fn.handle, *dims), config, packer.kernel_params, s)

    tensor_type = torch_tensor_type()
    torch_stream = raw_stream is None and has_pointers
    namespace = fast_namespace(packer, tensor_type, {
        "general": general, "failed": failed,
        "get_ident": threading.get_ident, "owner": threading.get_ident(),
        "PACK_ERRORS": PACK_ERRORS, "params": packer.kernel_params,
        "fn": fn.handle, "config": config, "launch": kernel._launch_kernel, "launch_ex": kernel._launch_kernel_ex,
        "streams": streams, "add_stream": add_stream,
        "stream_of": torch_stream_getter() if torch_stream and tensor_type is not None else None,
        "s": None if torch_stream else (streams.get(raw_stream or 0) or add_stream(raw_stream or 0)),
        **dict(zip(DIMS, dims)),
    })
    names = parameter_names(kernel.signature.params, namespace)
    from_pointers = all(p.kind in _FROM_POINTERS_KINDS for p in packer.params)
    source = launcher_source(packer, config is not None, "torch" if torch_stream else "fixed", ordinal,
                             names, "busy" if gil_guards_launches() else "owner",
                             only_device=only_visible_device(), from_pointers=from_pointers)
    make_launcher, _ = compile_function(source, f"launcher {kernel.name}", namespace)
    launcher, launcher.from_pointers = make_launcher()
    launcher.__name__ = kernel.name
    launcher.__qualname__ = f"{kernel.name}[grid={grid}, block={block}, smem_bytes={smem_bytes}]"
    launcher.__doc__ = (f"Launch {kernel.name!r} on grid {grid}, block {block}; takes its arguments "
                        f"({', '.join(p.name for p in kernel.signature.params)}).")
    launcher.kernel, launcher.device, launcher.source = kernel, ordinal, source
    launcher.grid, launcher.block, launcher.smem_bytes, launcher.cluster = grid, block, smem_bytes, cluster
    launcher.stream = raw_stream

    def launch_parts() -> LaunchParts | None:
        """What a caller needs to launch as this launcher does, in its own generated code, with a
        parameter buffer of its own (see LaunchParts); None where the launcher is not of that kind
        (a cluster, a fixed stream, free-threaded, a parameter other than a pointer, int or float,
        or torch not imported yet)."""
        if (config is not None or not torch_stream or not gil_guards_launches()
                or namespace["T"] is NeverATensor or namespace["stream_of"] is None
                or not all(p.kind in _PARTS_KINDS for p in packer.params)):
            return None
        own = ArgumentPacker(kernel.signature)

        def own_failed(err, s):
            kernel._launch_failed(err, fn, (fn.handle, *dims), config, own.kernel_params, s)
        return LaunchParts(fn.handle, *dims, kernel._launch_kernel, own.kernel_params,
                           own._struct.pack_into, own._storage, own._base, namespace["stream_of"],
                           ordinal, streams, add_stream, own_failed, namespace["T"],
                           tuple(p.pointer_align for p in packer.params if p.kind is ParamKind.POINTER),
                           only_visible_device(), launcher)
    launcher.launch_parts = launch_parts
    return launcher


_PARTS_KINDS = (ParamKind.POINTER, ParamKind.INT, ParamKind.FLOAT)


class LaunchParts(NamedTuple):
    """A configured launcher's launch, in parts, for generated code that checks the arguments
    itself (the DSL's kernel[grid]): `launch(fn, gx, gy, gz, bx, by, bz, smem, stream, params, 0)`
    after `pack_into(storage, base, *values)` into a buffer no one else writes (its own, so that
    its caller may remember what it last packed) and the stream `streams[stream_of(ordinal)]`
    (`add_stream(raw)` for a new one); `failed(err, stream)` raises the worded launch error. The
    caller keeps the launcher's rules: every pointer an exact `tensor_type` on device `ordinal`
    (`is_cuda` where `only_device`) with `pointer_aligns[i]` dividing the i-th pointer, ints and
    floats exact (PACK_ERRORS: the checked path), one call at a time per buffer."""

    fn: object
    gx: int
    gy: int
    gz: int
    bx: int
    by: int
    bz: int
    smem: int
    launch: object
    params: int
    pack_into: object
    storage: object
    base: int
    stream_of: object
    ordinal: int
    streams: dict
    add_stream: object
    failed: object
    tensor_type: type
    pointer_aligns: tuple
    only_device: bool
    launcher: object     # the configured launcher these are the parts of
