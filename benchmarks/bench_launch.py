"""Per-launch host overhead: layoutkit's CompiledKernel.launch, its configured launcher
(``kernel.configure(grid, block)``) and a DSL kernel's ``kernel[grid](args)`` against the raw cuda.bindings floor,
a trivial Triton kernel and a trivial PyTorch op, all in one run.

Each method launches an empty kernel (two tensor pointers + one int) in batches; a batch's time is
host wall time from before the first launch to after the synchronize that ends it, divided by the
launches in it. The table reports the median over batches (methods interleaved batch by batch) and
the same for the host loop alone (before the synchronize), each also as a ratio to the floor. The
configured launcher has a second row whose tensors alternate between two pairs, so that its buffer
is packed on every launch (the first row repeats the same tensors, whose packed values it keeps).

A second table times, alone and without launching, the launchers' Python work (the driver call
replaced by a no-op) and its parts that call into torch or the standard library (median µs per
call over batches), to say where the time above the floor goes on this host.

With ``--trees`` (JSON dumps of ``benchmarks/bench_launch_sources_cpu.py --dump``, one per tree)
the table gains each tree's generated DSL launch and configured launcher, run on this GPU with the
DSL kernel's real parts: the launch code of trees compared in the same run.

    python benchmarks/bench_launch.py [--launches 10000] [--batch 500] [--trees old.json new.json]
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import layoutkit as lk  # noqa: E402
from layoutkit.ptx import CompiledKernel, assemble  # noqa: E402
from layoutkit.ptx import debug_raw_lookup, driver  # noqa: E402
from layoutkit.ptx.arguments import ArgumentPacker  # noqa: E402
from layoutkit.ptx.launcher import LaunchParts  # noqa: E402
from layoutkit.tools.benchmarking import host_call_times  # noqa: E402

EMPTY = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry empty(.param .u64 a, .param .u64 b, .param .u32 n)
{
    ret;
}
"""


def layoutkit_launcher(a, b, n):
    kernel = CompiledKernel(assemble(EMPTY))
    launch = kernel.launch

    def run():
        launch(a, b, n, grid=1, block=32)
    return run


def layoutkit_configured_launcher(a, b, n):
    launcher = CompiledKernel(assemble(EMPTY)).configure(1, 32)

    def run():
        launcher(a, b, n)
    return run


def layoutkit_configured_alternating(a, b, n):
    launcher = CompiledKernel(assemble(EMPTY)).configure(1, 32)
    c, d = torch.empty_like(a), torch.empty_like(b)

    def run():  # two launches: new pointers every launch
        launcher(a, b, n)
        launcher(c, d, n)
    run.launches = 2
    return run


@lk.kernel(num_warps=1)
def empty_dsl_kernel(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], n: lk.i32):
    """Does nothing: the launch is what is timed."""


def layoutkit_dsl_launcher(a, b, n):
    """`kernel[grid](x, y, n)` of an empty @lk.kernel: the DSL's generated function, which tests
    the arguments, the specialization's facts, packs and launches from the LaunchParts it holds."""
    launch = empty_dsl_kernel[1]

    def run():
        launch(a, b, n)
    return run


@lk.kernel(num_warps=1, debug=False)
def empty_release_kernel(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], n: lk.i32):
    """`empty_dsl_kernel` with its debug flag fixed: its launch reads no LAYOUTKIT_DEBUG."""


def layoutkit_dsl_release(a, b, n):
    """`kernel[grid](x, y, n)` of a kernel whose debug flag is fixed (debug=False)."""
    launch = empty_release_kernel[1]

    def run():
        launch(a, b, n)
    return run


def layoutkit_dsl_indexed(a, b, n):
    """`kernel[1](x, y, n)` with the grid indexed at every call, as the recipes launch."""
    def run():
        empty_dsl_kernel[1](a, b, n)
    return run


def tree_launchers(paths: list[str], a, b, n) -> dict:
    """Per dumped tree (JSON of `bench_launch_sources_cpu.py --dump`, named by its file's stem),
    its generated DSL launch and configured launcher of empty_dsl_kernel's signature, run here
    with that kernel's real loaded function, launch shape, stream query and driver call, each
    with a parameter buffer of its own: the launch code of several trees timed in one run."""
    empty_dsl_kernel[1](a, b, n)          # (a checked first launch where none ran yet) parts kept
    fast = empty_dsl_kernel._fast
    launcher = next(e.launcher for e in fast.launchers.values() if isinstance(e, LaunchParts))
    rows = {}
    for path in paths:
        tree, name = json.loads(Path(path).read_text()), Path(path).stem
        parts = launcher.launch_parts()

        class EveryKey(dict):
            """The remembered launchers: this tree's parts for the first call's lookup."""

            def get(self, key, default=None, parts=parts):
                return parts
        held = {"__builtins__": {**fast.namespace, "_lk_launchers": EveryKey()}, "__name__": __name__,
                "_lk_grid": 1}
        exec(compile(tree["dsl"], f"<{name}: DSL launch>", "exec"), held)
        dsl = held["_lk_make"]() if "_lk_make" in held else held["launch"]
        own = ArgumentPacker(launcher.kernel.signature)
        names = {**launcher.__globals__, "pack_into": own._struct.pack_into, "storage": own._storage,
                 "base": own._base, "params": own.kernel_params,
                 "packer": own}   # keeps the pointer array at `params` alive: the driver reads it
        exec(compile(tree["launcher"], f"<{name}: configured launcher>", "exec"), names)
        configured = names["make_launcher"]()[0]
        rows[f"tree {name}: DSL kernel[grid](x, y, n)"] = lambda dsl=dsl: dsl(a, b, n)
        rows[f"tree {name}: configured launcher(x, y, n)"] = lambda configured=configured: configured(a, b, n)
    return rows


def safe_tree_launchers(paths: list[str], a, b, n) -> dict:
    """tree_launchers, or none (with the reason on stderr) where a tree's code does not load here:
    the rest of the table is still measured."""
    try:
        return tree_launchers(paths, a, b, n) if paths else {}
    except Exception as error:   # noqa: BLE001 - a dumped tree of another contract
        print(f"--trees left out: {type(error).__name__}: {error}", file=sys.stderr)
        return {}


def raw_floor_launcher(a, b, n):
    """cuLaunchKernel on the same cubin with the parameters packed once: the floor."""
    cu = driver.bindings()
    fn = driver.load_function(assemble(EMPTY).data, "empty", driver.device(a.device.index)).handle
    values = (ctypes.c_uint64(a.data_ptr()), ctypes.c_uint64(b.data_ptr()), ctypes.c_uint32(n))
    pointers = (ctypes.c_void_p * 3)(*[ctypes.addressof(v) for v in values])
    params = ctypes.addressof(pointers)
    stream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
    launch = cu.cuLaunchKernel

    def run():
        launch(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, 0)
    run.keep = (values, pointers)
    return run


def triton_launcher(a, b, n):
    try:
        import triton
    except ImportError:
        return None

    @triton.jit
    def empty(a_ptr, b_ptr, n):
        pass

    def run():
        empty[(1,)](a, b, n)
    return run


def torch_launcher(a, b, n):
    x = torch.zeros(4, device="cuda")

    def run():
        x.add_(1)
    return run


def measure(launchers, launches: int, batch: int) -> dict[str, tuple[float, float]]:
    """{name: (µs per call including the synchronize that ends each batch, µs of the host loop
    alone)}, medians over launches // batch batches of `batch` calls, candidates interleaved
    batch by batch after 1000 warm-up calls each (a candidate with `.launches` = k launches k
    times per call)."""
    for run in launchers.values():  # warm-up: module loads, JIT, caches
        for _ in range(1000):
            run()
    torch.cuda.synchronize()
    total, host = {name: [] for name in launchers}, {name: [] for name in launchers}
    for _ in range(max(launches // batch, 1)):
        for name, run in launchers.items():
            calls = batch // getattr(run, "launches", 1)
            start = time.perf_counter()
            for _ in range(calls):
                run()
            queued = time.perf_counter()
            torch.cuda.synchronize()
            end = time.perf_counter()
            total[name].append((end - start) / (calls * getattr(run, "launches", 1)) * 1e6)
            host[name].append((queued - start) / (calls * getattr(run, "launches", 1)) * 1e6)
    return {name: (statistics.median(total[name]), statistics.median(host[name])) for name in launchers}


def no_op_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                 hStream, kernelParams, extra):
    return (0,)


def launcher_parts(a, b, n) -> dict:
    """The configured launcher without the driver call (a no-op in its place), beside the floor's
    call of the same no-op, and its calls into torch and the standard library, each alone."""
    launcher = CompiledKernel(assemble(EMPTY)).configure(1, 32)
    names = launcher.__globals__  # this launcher's own namespace: the no-op replaces only its driver call
    names["launch"] = no_op_launch
    pack_into, storage, base = names["pack_into"], names["storage"], names["base"]
    stream_of, index = names["stream_of"], a.device.index
    get_ident, pa, pb = threading.get_ident, a.data_ptr(), b.data_ptr()
    t, c, d = torch.Tensor, torch.empty_like(a), torch.empty_like(b)
    fn, stream = names["fn"], driver.bindings().CUstream(0)

    def alternating():
        launcher(a, b, n)
        launcher(c, d, n)
    alternating.launches = 2
    empty_dsl_kernel[1](a, b, n)   # (a checked first launch where none ran yet) the parts kept,
    fast = empty_dsl_kernel._fast  # whose driver call is a no-op from now on
    for key, entry in fast.launchers.items():
        if isinstance(entry, LaunchParts):
            fast.launchers[key] = entry._replace(launch=no_op_launch)
        else:
            entry.__globals__["launch"] = no_op_launch
    empty_dsl_kernel._grids.clear()   # a new function for grid 1: it holds no parts yet
    dsl = empty_dsl_kernel[1]
    f32, (debug_key, _) = torch.float32, debug_raw_lookup()

    def dsl_signature(x=None, y=None, n=None, /, *more, **kwargs):
        """The DSL function's signature, nothing done: what its call costs alone."""

    def positional(x, y, n, /):
        """The configured launcher's signature, nothing done."""
    return {
        "floor's call with a no-op for cuLaunchKernel": lambda: no_op_launch(fn, 1, 1, 1, 32, 1, 1, 0, stream,
                                                                              names["params"], 0),
        "configured launcher(x, y, n), a no-op for cuLaunchKernel": lambda: launcher(a, b, n),
        "  same, tensors alternating (packed every launch)": alternating,
        "DSL kernel[grid](x, y, n), a no-op for cuLaunchKernel": lambda: dsl(a, b, n),
        "tensor.data_ptr()": lambda: a.data_ptr(),
        "tensor.get_device()": lambda: a.get_device(),
        "tensor.is_cuda (what a one-device launcher asks instead)": lambda: a.is_cuda,
        "type(tensor) is torch.Tensor": lambda: type(a) is t,
        f"current stream query ({getattr(stream_of, '__name__', stream_of)})": lambda: stream_of(index),
        "struct pack_into of (a, b, n) into the parameter buffer": lambda: pack_into(storage, base, pa, pb, n),
        "threading.get_ident() (the owner check of free-threaded builds)": lambda: get_ident(),
        "tensor.dtype is torch.float32 (the DSL's dtype test)": lambda: a.dtype is f32,
        "os.environ._data.get(key) (the DSL's read of LAYOUTKIT_DEBUG)": lambda: os.environ._data.get(debug_key),
        "a call of f(x, y, n, /, *more, **kwargs) (the DSL's signature)": lambda: dsl_signature(a, b, n),
        "a call of f(x, y, n, /) (the configured launcher's signature)": lambda: positional(a, b, n),
        "an empty Python call (the lambda around each part)": lambda: None,
    }


def measure_parts(parts: dict, calls: int = 2000, repeats: int = 51) -> dict[str, float]:
    """Median µs per call (per launch for a part that launches twice) of each part, over ``repeats``
    interleaved batches of ``calls``."""
    times = host_call_times(parts, calls, repeats)
    return {name: statistics.median(t) / getattr(parts[name], "launches", 1) * 1e6
            for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--trees", nargs="+", default=[], metavar="JSON",
                        help="also time these trees' generated launch code (bench_launch_sources_cpu.py --dump)")
    args = parser.parse_args()
    a, b, n = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda"), 1024
    launchers = {
        "raw cuLaunchKernel (floor)": raw_floor_launcher(a, b, n),
        "layoutkit CompiledKernel.launch": layoutkit_launcher(a, b, n),
        "layoutkit kernel.configure(grid, block)(x, y, n)": layoutkit_configured_launcher(a, b, n),
        "  same, tensors alternating (packed every launch)": layoutkit_configured_alternating(a, b, n),
        "layoutkit DSL kernel[grid](x, y, n)": layoutkit_dsl_launcher(a, b, n),
        "  same, kernel[1] indexed at every call": layoutkit_dsl_indexed(a, b, n),
        "  same, a kernel with debug=False (no LAYOUTKIT_DEBUG read)": layoutkit_dsl_release(a, b, n),
        "triton (empty @triton.jit)": triton_launcher(a, b, n),
        "torch x.add_(1)": torch_launcher(a, b, n),
        **safe_tree_launchers(args.trees, a, b, n),
    }
    launchers = {name: run for name, run in launchers.items() if run is not None}
    results = measure(launchers, args.launches, args.batch)
    floor_total, floor_host = results["raw cuLaunchKernel (floor)"]
    print(f"\nLaunch overhead, {datetime.date.today()}, {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"{args.launches} launches per method in batches of {args.batch} (median over batches)\n")
    print("| method | µs per launch (incl. sync) | ratio | µs host loop only | ratio |")
    print("|---|---:|---:|---:|---:|")
    for name, (total, host) in results.items():
        print(f"| {name} | {total:.2f} | {total / floor_total:.2f} | {host:.2f} | {host / floor_host:.2f} |")
    print("\nThe configured launcher's Python work on this host: the launcher and the floor's call with a no-op "
          "in place of cuLaunchKernel, then the parts that call into torch or the standard library, each "
          "alone (median µs per call, including the empty call of the last row)\n")
    print("| part | µs per call |")
    print("|---|---:|")
    for name, us in measure_parts(launcher_parts(a, b, n)).items():
        print(f"| {name} | {us:.3f} |")


if __name__ == "__main__":
    main()
