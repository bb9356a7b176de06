"""What cuda.bindings' own Python side of `cuLaunchKernel` costs, on a machine without a GPU: the
floor of benchmarks/bench_launch.py is this call, and everything in it but the driver's work is
host Python that no launcher of ours can skip.

A stand-in libcuda.so.1 (compiled here with the C compiler: every entry point returns
CUDA_SUCCESS and does nothing) is put on LD_LIBRARY_PATH of a child process, which times
`cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, 0)` with the stream and the parameter
array passed in the forms a launcher could choose (ns per call, best of interleaved repeats).

    python benchmarks/bench_driver_call_cpu.py [--calls 100000] [--repeats 9]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

STAND_IN = r"""
typedef unsigned long long u64;
static int success(void) { return 0; }
int cuGetProcAddress_v2(const char *symbol, void **pfn, int version, u64 flags, int *status) {
    *pfn = (void *)success; if (status) *status = 0; return 0; }
int cuGetProcAddress(const char *symbol, void **pfn, int version, u64 flags) {
    *pfn = (void *)success; return 0; }
int cuDriverGetVersion(int *version) { *version = 13000; return 0; }
int cuInit(unsigned flags) { return 0; }
"""


def stand_in_library(directory: Path) -> Path:
    """Compile the stand-in libcuda.so.1 into `directory`; raises RuntimeError without a C compiler."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("bench_driver_call_cpu: no C compiler (cc or gcc) to build the stand-in libcuda")
    source = directory / "stand_in.c"
    source.write_text(STAND_IN)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(directory / "libcuda.so.1"), str(source)], check=True)
    return directory


def rows():
    """{row: zero-argument call}: the driver call in each argument form, and an empty call."""
    import ctypes

    from cuda.bindings import driver as cu
    fn, stream, pointers = cu.CUfunction(), cu.CUstream(0), (ctypes.c_void_p * 3)()
    params, launch = ctypes.addressof(pointers), cu.cuLaunchKernel
    return {
        "cuLaunchKernel, stream a held CUstream, kernelParams an int (the floor's and our form)":
            lambda: launch(fn, 1, 1, 1, 32, 1, 1, 0, stream, params, 0),
        "  same, stream an int (0)": lambda: launch(fn, 1, 1, 1, 32, 1, 1, 0, 0, params, 0),
        "  same, stream None": lambda: launch(fn, 1, 1, 1, 32, 1, 1, 0, None, params, 0),
        "  same, kernelParams None (no parameters)": lambda: launch(fn, 1, 1, 1, 32, 1, 1, 0, stream, None, 0),
        "an empty Python call": lambda: None,
    }, pointers


def measure(calls: int, repeats: int) -> dict[str, float]:
    """Best ns per call of each row over `repeats` interleaved rounds of `calls` calls."""
    from layoutkit.tools.benchmarking import host_call_times
    table, _keep = rows()
    for run in table.values():
        assert run() in (None, (0,)), "the stand-in's call did not return (CUDA_SUCCESS,)"
    return {name: min(t) * 1e9 for name, t in host_call_times(table, calls, repeats).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.child:
        with tempfile.TemporaryDirectory() as directory:
            env = {**os.environ, "LD_LIBRARY_PATH": str(stand_in_library(Path(directory))),
                   "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
            subprocess.run([sys.executable, __file__, "--child", "--calls", str(args.calls),
                            "--repeats", str(args.repeats)], env=env, check=True)
        return
    times = measure(args.calls, args.repeats)
    print(f"Python {sys.version.split()[0]}; ns per call, best of {args.repeats} x {args.calls}, a stand-in "
          "libcuda whose entry points return at once\n")
    print("| row | ns |")
    print("|---|---:|")
    for name, ns in times.items():
        print(f"| {name} | {ns:.1f} |")


if __name__ == "__main__":
    main()
