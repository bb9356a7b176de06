"""The generated launch code's own Python, trees compared in one process on the CPU: the DSL's
fast launch (layoutkit.dsl.core.launch_fast) and the configured launcher (layoutkit.ptx.launcher)
of bench_launch.py's kernel (two f32 pointers and an i32), each tree's source exec'd and timed
interleaved with every other's, against the floor's call of the same no-op driver function.

The tensors are real torch CPU tensors, so that every read the code makes (`dtype`,
`data_ptr()`, the device test) is torch's own C getter; the one-device test `is_cuda` is read as
`is_cpu` (the same kind of getter), the current-stream query is a dict's `get` and the driver call
a no-op. The held path is timed: the same tensors and int at every call, as bench_launch.py's
rows launch. Sources come from `--dump FILE` run in each tree (a tree from 60a03b9 on, whose
fast path and launcher take the namespaces built here).

    python benchmarks/bench_launch_sources_cpu.py --dump /tmp/new.json         # in each tree
    python benchmarks/bench_launch_sources_cpu.py /tmp/old.json /tmp/new.json  # A/B
    python benchmarks/bench_launch_sources_cpu.py --dump-probes /tmp/probes    # what each part costs
"""
from __future__ import annotations

import argparse
import ctypes
import json
import re
import statistics
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PTX_SIGNATURE = ".entry empty(.param .u64 .ptr.align 16 x, .param .u64 .ptr.align 16 y, .param .u32 n) { ret; }"


def this_tree() -> dict[str, str]:
    """This tree's two generated sources for bench_launch.py's kernel."""
    from layoutkit.dsl.core.arguments import parameter
    from layoutkit.dsl.core.launch_fast import fast_launch_source
    from layoutkit.dsl.core.types import Pointer, f32, i32
    from layoutkit.ptx.arguments import ArgumentPacker
    from layoutkit.ptx.launcher import launcher_source
    from layoutkit.ptx.signature import parse_entry
    params = [parameter("x", Pointer[f32]), parameter("y", Pointer[f32]), parameter("n", i32)]
    launcher = launcher_source(ArgumentPacker(parse_entry(PTX_SIGNATURE)), cluster=False, stream="torch",
                               ordinal=0, names=["x", "y", "n"], only_device=True, from_pointers=True)
    return {"dsl": fast_launch_source(params, debug=None), "launcher": launcher}


def probe_trees(tree: dict[str, str]) -> dict[str, dict[str, str]]:
    """Probes, for measurement only (what a required part of the DSL's launch costs, timed beside
    the tree it is taken from; never library code): `tree` with its DSL source lacking the dtype
    tests, the LAYOUTKIT_DEBUG read (the raw value None), or the variadic signature (an exact
    positional one, whose keyword branch is gone; or one without `**kwargs`, whose keywords
    Python binds, so that an unknown or repeated name would be Python's TypeError), and lacking
    the first three. Raises ValueError where a part is not found as this tree writes it (a probe
    that took nothing out would mislead)."""
    def without(source: str, pattern: str, replacement: str) -> str:
        out, count = re.subn(pattern, replacement, source)
        if not count:
            raise ValueError(f"probe_trees: {pattern!r} is not in the tree's DSL source")
        return out

    def no_dtype(source):
        return without(source, r" and \w+\.dtype is _lk_D\d+", "")

    def no_debug(source):
        return without(source, re.escape("_lk_os.environ._data.get(_lk_debug_key)"), "None")

    def exact_signature(source):
        source = without(source, r"def launch\((.*?)=_lk_NO, /, \*_lk_more, \*\*_lk_kwargs\):",
                         lambda m: f"def launch({m.group(1).replace('=_lk_NO', '')}, /):")
        return without(source, r"\n        if _lk_kwargs or _lk_more:\n(            .*\n)+", "\n")

    def no_kwargs_dict(source):      # keywords bound by Python, the stream keyword-only
        source = without(source, r"def launch\((.*?)=_lk_NO, /, \*_lk_more, \*\*_lk_kwargs\):",
                         lambda m: f"def launch({m.group(1)}=_lk_NO, *_lk_more, stream=None):")
        return without(source, r"\n        if _lk_kwargs or _lk_more:\n(            .*\n)+",
                       "\n        if _lk_more or stream is not None:\n            return None\n")
    probes = {"probe_no_dtype_tests": no_dtype, "probe_no_debug_read": no_debug,
              "probe_exact_signature": exact_signature, "probe_no_kwargs_dict": no_kwargs_dict,
              "probe_none_of_the_three": lambda s: exact_signature(no_debug(no_dtype(s)))}
    return {name: {**tree, "dsl": probe(tree["dsl"])} for name, probe in probes.items()}


def no_op_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
    return (0,)


class Stand:
    """Stands for a CUfunction / CUstream: an object passed through."""


def parameter_buffer():
    """(pack_into, storage, base) of a buffer for (u64, u64, u32)."""
    return struct.Struct("<QQI").pack_into, (ctypes.c_char * 64)(), 0


def dsl_function(source: str, torch, stream):
    """The DSL's generated launch of `source`, holding LaunchParts whose driver call is a no-op."""
    from layoutkit.dsl.core.arguments import parameter
    from layoutkit.dsl.core.launch_fast import FastLaunch
    from layoutkit.dsl.core.types import Pointer, f32, i32
    from layoutkit.ptx.launcher import LaunchParts
    pack_into, storage, base = parameter_buffer()
    parts = LaunchParts(Stand(), 1, 1, 1, 32, 1, 1, 0, no_op_launch, 0x1234, pack_into, storage, base,
                        {0: 0}.get, 0, {0: stream}, None, None, torch.Tensor, (16, 16), True, None)

    class EveryKey(dict):
        """The remembered launchers: these parts for any key (the first call's lookup)."""

        def get(self, key, default=None):
            return parts

    def checked(*args):
        raise RuntimeError("the generated function took the checked path")
    params = [parameter("x", Pointer[f32]), parameter("y", Pointer[f32]), parameter("n", i32)]
    fast = FastLaunch("empty", params, None, checked)
    fast.namespace.update({"_lk_T": torch.Tensor, "_lk_D0": torch.float32, "_lk_D1": torch.float32,
                           "_lk_launchers": EveryKey()})
    held = {"__builtins__": fast.namespace, "__name__": "bench", "_lk_grid": 1}
    exec(compile(source.replace(".is_cuda", ".is_cpu"), "<dsl launch>", "exec"), held)
    return held["_lk_make"]() if "_lk_make" in held else held["launch"]


def launcher_function(source: str, torch, stream):
    """The configured launcher of `source`, with a no-op driver call."""
    from layoutkit.ptx.launcher import PACK_ERRORS
    pack_into, storage, base = parameter_buffer()

    def general(args):
        raise RuntimeError("the launcher took the checked path")
    namespace = {"T": torch.Tensor, "pack_into": pack_into, "storage": storage, "base": base,
                 "general": general, "failed": None, "PACK_ERRORS": PACK_ERRORS, "params": 0x1234,
                 "fn": Stand(), "launch": no_op_launch, "streams": {0: stream}, "add_stream": None,
                 "stream_of": {0: 0}.get, "gx": 1, "gy": 1, "gz": 1, "bx": 32, "by": 1, "bz": 1, "smem": 0}
    exec(compile(source.replace(".is_cuda", ".is_cpu"), "<configured launcher>", "exec"), namespace)
    return namespace["make_launcher"]()[0]


def rows(sources: dict[str, dict]) -> dict:
    import torch
    x, y, n, stream, fn = torch.zeros(1024), torch.zeros(1024), 1024, Stand(), Stand()
    out = {"floor's call of the no-op driver function": lambda: no_op_launch(fn, 1, 1, 1, 32, 1, 1, 0, stream,
                                                                             0x1234, 0)}
    for name, tree in sources.items():
        dsl, launcher = dsl_function(tree["dsl"], torch, stream), launcher_function(tree["launcher"], torch, stream)
        dsl(x, y, n), launcher(x, y, n)           # the first call: lookup and pack
        out[f"{name}: DSL kernel[grid](x, y, n)"] = lambda f=dsl: f(x, y, n)
        out[f"{name}: configured launcher(x, y, n)"] = lambda f=launcher: f(x, y, n)
    out["an empty call (the lambda around each row)"] = lambda: None
    return out


def measure(table: dict, calls: int, repeats: int) -> dict[str, list[float]]:
    """ns per call of each row, one entry per repeat (host_call_times, interleaved)."""
    from layoutkit.tools.benchmarking import host_call_times
    return {name: [t * 1e9 for t in times]
            for name, times in host_call_times(table, calls, repeats).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="*", help="JSON files of --dump (default: this tree's sources)")
    parser.add_argument("--dump", metavar="FILE", help="write this tree's sources to FILE and stop")
    parser.add_argument("--dump-probes", metavar="DIR", help="write probe_trees(this tree) to DIR/<probe>.json "
                        "and stop (measurement only: each lacks a required part of the DSL launch)")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=150)
    args = parser.parse_args()
    if args.dump:
        Path(args.dump).write_text(json.dumps(this_tree()))
        return
    if args.dump_probes:
        for name, tree in probe_trees(this_tree()).items():
            (Path(args.dump_probes) / f"{name}.json").write_text(json.dumps(tree))
        return
    sources = {Path(p).stem: json.loads(Path(p).read_text()) for p in args.sources} or {"this tree": this_tree()}
    times = measure(rows(sources), args.calls, args.repeats)
    empty = min(times["an empty call (the lambda around each row)"])
    print(f"Python {sys.version.split()[0]}; ns per call, best and 10th percentile of {args.repeats} x "
          f"{args.calls} calls, interleaved; 'own' is the best less an empty call's\n")
    print("| row | ns best | ns own | ns p10 |")
    print("|---|---:|---:|---:|")
    for name, t in times.items():
        print(f"| {name} | {min(t):.1f} | {min(t) - empty:.1f} | {statistics.quantiles(t, n=10)[0]:.1f} |")


if __name__ == "__main__":
    main()
