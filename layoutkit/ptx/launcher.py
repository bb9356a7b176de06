"""Configured launchers: a launch shape checked once, then launches that take only the kernel's arguments.

``launcher = kernel.configure(grid, block, smem_bytes=0, stream=None, cluster=None, device=None)``
checks the shape against the kernel loaded on ``device`` (default: the current device) and returns a
function; ``launcher(*args)`` then does what ``kernel.launch(*args, grid=grid, block=block, ...)``
does: the same device and stream choice, the same argument checks, the same errors.

Its common case runs as one function generated for the signature (see layoutkit.ptx.fastpath):
every pointer argument an exact torch tensor on the configured device, every integer an exact
``int`` (range-checked by ``struct.pack_into``), every float an exact ``float``, every tensor map a
TensorMap, called from the thread that configured it (the parameter buffer is that thread's). Any
other call goes through ``kernel.launch``, so arguments on another device, DeviceBuffers, numpy
integers or a call from another thread still launch correctly, only slower, and every error a user
can cause is worded there.

>>> from layoutkit.ptx.signature import parse_entry
>>> from layoutkit.ptx.arguments import ArgumentPacker
>>> sig = parse_entry(".entry k(.param .u64 .ptr.align 16 x, .param .u32 n) { ret; }")
>>> print(launcher_source(ArgumentPacker(sig), dims=(2, 1, 1, 128, 1, 1, 0), cluster=False, stream="torch"))
def launcher(a0=MISSING, a1=MISSING, /, *extra):
    if a1 is MISSING or extra or get_ident() != owner:
        return general((a0, a1), extra)
    if type(a0) is not T:
        return general((a0, a1), extra)
    if type(a1) is not int:
        return general((a0, a1), extra)
    d = a0.get_device()
    if d != ordinal:
        return general((a0, a1), extra)
    p0 = a0.data_ptr()
    if p0 % 16:
        return general((a0, a1), extra)
    try:
        pack_into(storage, base, p0, a1)
    except PACK_ERRORS:
        return general((a0, a1), extra)
    raw = stream_of(ordinal)
    s = streams.get(raw)
    if s is None:
        s = add_stream(raw)
    err = launch(fn, 2, 1, 1, 128, 1, 1, 0, s, params, 0)[0]
    if err:
        failed(err, s)
"""
from __future__ import annotations

import struct
import threading

from . import driver
from .arguments import ArgumentPacker, torch_tensor_type
from .fastpath import NeverATensor, argument_checks, compile_function, fast_namespace
from .launch import _dim3, _stream_handle, torch_stream_getter

__all__ = ["configured_launcher", "launcher_source"]

MISSING = object()  # the default of the generated launcher's parameters: "not given"

# What pack_into raises for an exact int or float its format cannot hold; the checked path words it.
PACK_ERRORS = (struct.error, OverflowError)


def launcher_source(packer: ArgumentPacker, dims: tuple, cluster: bool, stream: str) -> str:
    """The generated launcher's source for ``packer``'s signature.

    ``dims``: (grid x, y, z, block x, y, z, dynamic shared bytes), written into the call;
    ``cluster``: launch through ``cuLaunchKernelEx`` with the namespace's ``config``;
    ``stream``: "fixed" (the namespace's ``s``) or "torch" (PyTorch's current stream on the device).
    """
    n = len(packer.params)
    names = [f"a{i}" for i in range(n)]
    # Positional parameters (cheaper to call than *args), defaulting to MISSING so that a call with
    # too few or too many arguments still reaches launch(), which words the error.
    miss = f"return general(({', '.join(names)}{',' if n == 1 else ''}), extra)"
    lines = [f"def launcher({''.join(a + '=MISSING, ' for a in names)}{'/, ' if n else ''}*extra):",
             f"    if {f'a{n - 1} is MISSING or ' if n else ''}extra or get_ident() != owner:\n        {miss}"]
    checks, values = argument_checks(packer.params, miss, on_device="ordinal")
    lines += checks
    lines.append(f"    try:\n        pack_into(storage, base{''.join(', ' + v for v in values)})\n"
                 f"    except PACK_ERRORS:\n        {miss}")
    if stream == "torch":
        lines.append("    raw = stream_of(ordinal)\n    s = streams.get(raw)\n    if s is None:\n"
                     "        s = add_stream(raw)")
    if cluster:
        lines.append("    config.hStream = s\n    err = launch_ex(config, fn, params, 0)[0]")
    else:
        lines.append(f"    err = launch(fn, {', '.join(str(v) for v in dims)}, s, params, 0)[0]")
    lines.append("    if err:\n        failed(err, s)")
    return "\n".join(lines)


def configured_launcher(kernel, grid, block, smem_bytes: int = 0, stream=None, cluster=None,
                        device: int | None = None):
    """``kernel.configure(...)``: see the module docstring. Raises LaunchConfigError for a shape the
    kernel cannot run on ``device`` and for a ``stream`` that is no stream."""
    ordinal = device if device is not None else driver.current_device().ordinal
    fn = kernel.function(ordinal)
    dims, config = kernel._launch_plan(fn, grid, block, smem_bytes, cluster)
    grid, block = dims[:3], dims[3:6]
    cluster = None if cluster is None else _dim3("cluster", cluster)
    raw_stream = None if stream is None else _stream_handle(stream)
    packer = ArgumentPacker(kernel.signature)
    has_pointers = packer.has_pointers
    streams = kernel._streams
    cu = driver.bindings()

    def add_stream(raw: int):
        handle = streams[raw] = cu.CUstream(raw)
        return handle

    def general(given: tuple, extra: tuple):
        """Every call the generated code does not take: kernel.launch with the configured shape."""
        args = tuple(a for a in given if a is not MISSING) + extra
        if namespace["T"] is NeverATensor and torch_tensor_type() is not None:
            namespace["T"], namespace["stream_of"] = torch_tensor_type(), torch_stream_getter()
        kernel.launch(*args, grid=grid, block=block, smem_bytes=smem_bytes, stream=raw_stream, cluster=cluster)

    def failed(err, s):
        kernel._launch_failed(err, fn, (fn.handle, *dims), config, packer.kernel_params, s)

    tensor_type = torch_tensor_type()
    torch_stream = raw_stream is None and has_pointers
    namespace = fast_namespace(packer, tensor_type, {
        "general": general, "failed": failed, "MISSING": MISSING,
        "get_ident": threading.get_ident, "owner": threading.get_ident(), "ordinal": ordinal,
        "PACK_ERRORS": PACK_ERRORS, "params": packer.kernel_params,
        "fn": fn.handle, "config": config, "launch": kernel._launch_kernel, "launch_ex": kernel._launch_kernel_ex,
        "streams": streams, "add_stream": add_stream,
        "stream_of": torch_stream_getter() if torch_stream and tensor_type is not None else None,
        "s": None if torch_stream else (streams.get(raw_stream or 0) or add_stream(raw_stream or 0)),
    })
    source = launcher_source(packer, dims, config is not None, "torch" if torch_stream else "fixed")
    launcher, _ = compile_function(source, f"launcher {kernel.name}", namespace)
    launcher.__name__ = kernel.name
    launcher.__qualname__ = f"{kernel.name}[grid={grid}, block={block}, smem_bytes={smem_bytes}]"
    launcher.__doc__ = (f"Launch {kernel.name!r} on grid {grid}, block {block}; takes its arguments "
                        f"({', '.join(p.name for p in kernel.signature.params)}).")
    launcher.kernel, launcher.device, launcher.source = kernel, ordinal, source
    launcher.grid, launcher.block, launcher.smem_bytes, launcher.cluster = grid, block, smem_bytes, cluster
    launcher.stream = raw_stream
    return launcher

