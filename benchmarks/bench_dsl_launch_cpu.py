"""The DSL's Python work per launch, measured on the CPU: `kernel[grid](args)` end to end, its
stages, the recipes' wrappers (softmax, layernorm, transpose) and the Hopper GEMM's host path
(a TMA kernel: its tensor maps on the fast path, and gemm()'s plans), with no GPU.

What stands in for the GPU: the driver's ``cuLaunchKernel`` is a no-op of the same signature,
``load_function`` returns a fake loaded function on a fake device 0, torch's current-stream query
is a dict lookup. The PTX is real (ptxas assembles it, as on the GPU). Tensors are real torch CPU
tensors posing as CUDA tensors of device 0: ``torch.Tensor.get_device`` and ``is_cuda`` are
overridden in Python for the run (each read costs ~0.05 µs more than torch's C getter), so every
layer takes the path it takes for CUDA tensors. For the GEMM rows (measured last) the tensors'
``device`` says cuda:0 too, ``torch.empty`` ignores its device, tensor maps are encoded by a fake
``cuTensorMapEncodeTiled`` and cluster launches go to a no-op ``cuLaunchKernelEx``. Needs torch
(any build; CPU is enough).

Rows, in µs per call (best and median of repeats of a batch of calls; on a shared CPU the best
is the steadier number): the configured launcher alone (the floor the DSL adds to), the DSL
call, the stages of the DSL call timed one by one, and each recipe wrapper beside the DSL call
it makes. "above" is the row minus the row it builds on.

    python benchmarks/bench_dsl_launch_cpu.py [--calls 5000] [--repeats 15] [--rows dsl recipes gemm]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import layoutkit.dsl as lk  # noqa: E402
from layoutkit.algebra import Layout  # noqa: E402
from layoutkit.ptx import Device, LoadedFunction, driver  # noqa: E402
from layoutkit.ptx import arguments, launch as launch_module  # noqa: E402
from layoutkit.tools.benchmarking import host_call_times  # noqa: E402

DEVICE = Device(0, None, None, {"MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,
                                "MAX_SHARED_MEMORY_PER_BLOCK": 49152})


@lk.kernel(num_warps=2)
def scale(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], n: lk.i64, a: lk.f32):
    """y = a * x over n elements, 4 per thread: the 4-argument kernel of the DSL rows."""
    tv = lk.tv_layout(Layout(64), Layout(4))
    X = lk.global_tensor(x, Layout(n)).tile((256,), (lk.block_id(0),)).partition(tv)
    Y = lk.global_tensor(y, Layout(n)).tile((256,), (lk.block_id(0),)).partition(tv)
    lk.store(Y, lk.load(X) * a)


@lk.kernel(num_warps=2)
def scale_by(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], n: lk.i64, a: lk.f32,
             VALUES: lk.constexpr):
    """`scale` with its values per thread a constexpr."""
    tv = lk.tv_layout(Layout(64), Layout(VALUES))
    X = lk.global_tensor(x, Layout(n)).tile((64 * VALUES,), (lk.block_id(0),)).partition(tv)
    Y = lk.global_tensor(y, Layout(n)).tile((64 * VALUES,), (lk.block_id(0),)).partition(tv)
    lk.store(Y, lk.load(X) * a)


@lk.kernel(num_warps=2)
def scale_t(x: lk.Tensor[lk.f32, 1], y: lk.Tensor[lk.f32, 1], a: lk.f32):
    """`scale` with Tensor parameters (n is x's extent): the Tensor rows."""
    tv = lk.tv_layout(Layout(64), Layout(4))
    X = x.tile((256,), (lk.block_id(0),)).partition(tv)
    Y = y.tile((256,), (lk.block_id(0),)).partition(tv)
    lk.store(Y, lk.load(X) * a)


@lk.kernel(num_warps=2)
def scale_2d(x: lk.Tensor[lk.f32, 2], y: lk.Tensor[lk.f32, 2], a: lk.f32):
    """`scale_t` over the rows of a matrix (block (j, i): 256 columns of row i)."""
    tv = lk.tv_layout(Layout((1, 64)), Layout((1, 4)))
    X = x.tile((1, 256), (lk.block_id(1), lk.block_id(0))).partition(tv)
    Y = y.tile((1, 256), (lk.block_id(1), lk.block_id(0))).partition(tv)
    lk.store(Y, lk.load(X) * a)


def no_op_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
    return (0,)


def install_fakes() -> None:
    """torch CPU tensors as CUDA tensors of device 0; a driver that loads and launches nothing."""
    torch.Tensor.get_device = lambda self: 0
    torch.Tensor.is_cuda = property(lambda self: True)
    arguments._torch_tensor = None
    launch_module._torch_stream_getter = {0: 0}.get
    driver.bindings().cuLaunchKernel = no_op_launch
    driver.current_device = lambda: DEVICE
    driver.device = lambda ordinal=0: DEVICE
    handle = driver.bindings().CUfunction()
    driver.load_function = lambda cubin, name, dev: LoadedFunction(name, dev, handle, 0, 32, 1024)


def launcher_of(kernel, grid, *args, **kwargs):
    """The configured launcher `kernel[grid]` ends in, and its runtime arguments."""
    spec = kernel.specialize(*args, **kwargs)
    values = kernel._runtime_values(_bound(kernel, args, kwargs))   # a tensor: it, its fields
    return spec.launcher(grid, 32 * kernel.num_warps), tuple(values)


def _bound(kernel, args, kwargs):
    names = [p.name for p in kernel.params]
    return tuple(args) + tuple(kwargs[n] for n in names[len(args):])


def dsl_rows() -> dict:
    x, y = torch.zeros(4096), torch.zeros(4096)
    x1 = torch.zeros(4097)[1:]                        # 4 bytes past a 16-byte boundary
    grid = 16
    launcher, runtime = launcher_of(scale, grid, x, y, 4096, 2.0)
    launcher_u, runtime_u = launcher_of(scale, grid, x1, y, 4096, 2.0)
    launcher(*runtime)
    launch = scale[grid]
    rows = {
        "configured launcher (x, y, n, a): the floor": lambda: launcher(*runtime),
        "scale[16](x, y, n, a)": lambda: scale[grid](x, y, 4096, 2.0),
        "launch(x, y, n, a), launch = scale[16] kept (as bench_launch.py calls it)":
            lambda: launch(x, y, 4096, 2.0),
        "scale[16](x, y, n=n, a=a)": lambda: scale[grid](x, y, n=4096, a=2.0),
        "scale[16] alternating aligned / unaligned x (2 calls)":
            lambda: (scale[grid](x, y, 4096, 2.0), scale[grid](x1, y, 4096, 2.0)),
        "  floor for the row above (2 calls)": lambda: (launcher(*runtime), launcher_u(*runtime_u)),
        "scale_by[16](x, y, n, a, 4)": lambda: scale_by[grid](x, y, 4096, 2.0, 4),
        "scale_by[16](x, y, n, a, VALUES=4)": lambda: scale_by[grid](x, y, 4096, 2.0, VALUES=4),
    }
    launcher_of(scale_by, grid, x, y, 4096, 2.0, 4)
    from bench_launch import empty_dsl_kernel as empty           # the GPU script's DSL kernel
    launcher_e, runtime_e = launcher_of(empty, 1, x, y, 4096)
    launch_e = empty[1]
    rows.update({
        "bench_launch.py's kernel: configured launcher (x, y, n)": lambda: launcher_e(*runtime_e),
        "  its launch(x, y, n), launch = kernel[1] kept (bench_launch.py's DSL row)":
            lambda: launch_e(x, y, 4096),
        "  an empty call (the lambda around each row)": lambda: None,
    })
    x2, y2 = x.view(16, 256), y.view(16, 256)
    launcher_t, runtime_t = launcher_of(scale_t, grid, x, y, 2.0)
    launcher_2d, runtime_2d = launcher_of(scale_2d, (1, 16), x2, y2, 2.0)
    rows.update({
        "scale_t[16](x, y, a): Tensor[f32, 1] x, y": lambda: scale_t[grid](x, y, 2.0),
        "  configured launcher (x, x's 2 fields, y, y's 2 fields, a): its floor":
            lambda: launcher_t(*runtime_t),
        "scale_2d[1, 16](x2, y2, a): Tensor[f32, 2] x2, y2":
            lambda: scale_2d[1, 16](x2, y2, 2.0),
        "  configured launcher (x2, 4 fields, y2, 4 fields, a): its floor":
            lambda: launcher_2d(*runtime_2d),
        "  x2.shape and x2.stride() of both tensors (the reads alone)":
            lambda: (x2.shape, x2.stride(), y2.shape, y2.stride()),
    })
    for run in rows.values():        # first launches: specialize, configure, build fast paths
        run()
    rows.update(stage_rows(scale, grid))
    return rows


def stage_rows(kernel, grid) -> dict:
    """The DSL call's stages one by one (what each costs alone), for this code's internals:
    `kernel[grid]` (kept per plain grid), the debug flag's read inside the generated function,
    the checked path's options. (The facts and the lookup: the alternating row above, whose
    facts change at every call.)"""
    import os

    from layoutkit.ptx import debug_raw_lookup
    key, flags = debug_raw_lookup()
    return {
        "  stage: kernel[grid] (kept per plain grid)": lambda: kernel[grid],
        "  stage: the debug flag (os.environ._data.get and its parsed value)":
            lambda: flags.get(os.environ._data.get(key)),
        "  stage: kernel.options() (the checked path's)": kernel.options,
    }


def recipe_rows() -> dict:
    from recipes import layernorm as ln
    from recipes import softmax as sm
    from recipes import transpose as tr
    m, n = 4096, 1024
    x = torch.zeros(m, n, dtype=torch.bfloat16)
    out = torch.empty_like(x)
    w, b = torch.zeros(n, dtype=torch.bfloat16), torch.zeros(n, dtype=torch.bfloat16)
    xt = torch.empty(n, m, dtype=torch.bfloat16)

    sm_kernel, sm_grid, (_, sm_n), sm_const = sm.launch_arguments(sm.config(m, n), m, n)[:4]
    ln_kernel, ln_grid, (_, ln_n), ln_const = ln.launch_arguments(ln.config(m, n), m, n)[:4]
    tr_kernel = tr.kernel_for(lk.bf16)
    tr_grid, rows_on_x = tr.grid(m, n, lk.bf16)
    sm.softmax(x, out), ln.layernorm(x, w, b, 1e-5, out), tr.transpose(x, xt)  # compile once
    sm_launcher, sm_runtime = launcher_of(sm_kernel, sm_grid, x, out, m, sm_n, **sm_const)
    ln_launcher, ln_runtime = launcher_of(ln_kernel, ln_grid, x, w, b, out, m, ln_n, 1e-5,
                                         **ln_const)
    tr_launcher, tr_runtime = launcher_of(tr_kernel, tr_grid, x, xt, m, n, rows_on_x)
    return {
        "softmax: configured launcher": lambda: sm_launcher(*sm_runtime),
        "softmax: kernel[grid](x, out, m, n_vectors, *constexprs)":
            lambda: sm_kernel[sm_grid](x, out, m, sm_n, *sm_const.values()),
        "softmax(x, out)": lambda: sm.softmax(x, out),
        "layernorm: configured launcher": lambda: ln_launcher(*ln_runtime),
        "layernorm: kernel[grid](x, w, b, out, m, n_vectors, eps, *constexprs)":
            lambda: ln_kernel[ln_grid](x, w, b, out, m, ln_n, 1e-5, *ln_const.values()),
        "layernorm(x, w, b, 1e-5, out)": lambda: ln.layernorm(x, w, b, 1e-5, out),
        "transpose: configured launcher": lambda: tr_launcher(*tr_runtime),
        "transpose: kernel[grid](x, out, m, n, rows_on_x)":
            lambda: tr_kernel[tr_grid](x, xt, m, n, rows_on_x),
        "transpose(x, out)": lambda: tr.transpose(x, xt),
    }


class _FakeMap:
    """Stands for a CUtensorMap: 128 bytes at an address."""

    def __init__(self):
        import ctypes
        self.buffer = ctypes.create_string_buffer(128)

    def getPtr(self) -> int:  # noqa: N802 - cuda-python's name
        import ctypes
        return ctypes.addressof(self.buffer)


def install_hopper_fakes() -> None:
    """install_fakes plus what the GEMM's launches need: tensor maps, cluster launches, the
    device's opt-in shared memory, and tensors whose device is cuda:0 (torch.empty then
    allocates on the CPU whatever device it is asked for)."""
    import contextlib
    cu = driver.bindings()
    cu.cuTensorMapEncodeTiled = lambda *args: (0, _FakeMap())
    cu.cuLaunchKernelEx = lambda config, f, params, extra: (0,)
    cu.cuOccupancyMaxActiveClusters = lambda f, config: (0, 66)    # 132 SMs in 2-CTA clusters
    driver.initialize = lambda: None
    driver.device_count = lambda: 1
    Device.activated = lambda self: contextlib.nullcontext(self)
    handle = driver.bindings().CUfunction()
    optin = DEVICE.max_dynamic_smem_optin
    driver.load_function = lambda cubin, name, dev: LoadedFunction(
        name, dev, handle, 0, 32, 1024, _dynamic_smem_limit=optin)
    cuda = torch.device("cuda", 0)
    torch.Tensor.device = property(lambda self: cuda)
    empty = torch.empty
    torch.empty = lambda *shape, device=None, dtype=None, **kw: empty(*shape, dtype=dtype, **kw)


def gemm_rows() -> dict:
    """Per GEMM shape: gemm(a, b, out=out); the same call's host path as before the plans
    (check_inputs, launches, kernel[grid]) and as before the tensor-map fast path too
    (Kernel.launch, the checked path); the first launch's kernel[grid] and its configured
    launcher alone (the floor: packing the arguments and 3 tensor maps)."""
    from bench_gemm_host import SHAPES as GEMM_SHAPES, host_path   # the GPU script's shapes
    from recipes import gemm_hopper as gh
    install_hopper_fakes()
    gh._sm_count = lambda device: 132                    # the fake device is an H200
    gh._NAMES[torch.device("cuda", 0)] = "fake H200"
    rows = {}
    for m, n, k, major in GEMM_SHAPES:
        a = torch.zeros(m, k, dtype=torch.bfloat16)
        b = torch.zeros(k, n, dtype=torch.bfloat16) if major == "N" else \
            torch.zeros(n, k, dtype=torch.bfloat16).t()
        out = torch.zeros(m, n, dtype=torch.bfloat16)
        gh.gemm(a, b, out=out)                               # specialize, configure, plan
        epilogue = gh.epilogue_of(out, None, None, None, 1.0, 0.0)
        steps, _ = gh.launches(a, b, out, None, epilogue, None, None, 1.0, 0.0, 132,
                               lambda cfg, major: gh._resident_units(a.device, cfg, major))
        kernel, grid, args, constexprs = steps[0]
        positional = (*args, *constexprs.values())
        spec = kernel.specialize(*positional)
        bound = tuple(positional)
        runtime = kernel._runtime_values(bound) + spec.plan.hidden_values(bound)
        launcher = spec.launcher(grid, 32 * kernel.num_warps)
        shape = f"{m}x{n}x{k} {major}-major"
        rows.update({
            f"gemm(a, b, out=out) {shape} ({len(steps)} launch{'es' * (len(steps) > 1)})":
                lambda a=a, b=b, out=out: gh.gemm(a, b, out=out),
            f"  {shape}: host path before the plans (check_inputs, launches, kernel[grid])":
                lambda a=a, b=b, out=out: host_path(a, b, out, False),
            f"  {shape}: and before the tensor-map fast path (Kernel.launch, checked)":
                lambda a=a, b=b, out=out: host_path(a, b, out, True),
            f"  {shape}: {kernel.name}[grid](a, b, c, *constexprs), its first launch":
                lambda kernel=kernel, grid=grid, positional=positional:
                    kernel[grid](*positional),
            f"  {shape}: configured launcher (a, b, c, 12 fields, 3 tensor maps): the floor":
                lambda launcher=launcher, runtime=runtime: launcher(*runtime),
        })
    for run in rows.values():
        run()
    return rows


def measure(rows: dict, calls: int, repeats: int) -> dict[str, tuple[float, float]]:
    """{row: (best, median) µs per call} (host_call_times, interleaved)."""
    return {name: (min(t) * 1e6, statistics.median(t) * 1e6)
            for name, t in host_call_times(rows, calls, repeats).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rows", nargs="+", choices=["dsl", "recipes", "gemm"],
                        default=["dsl", "recipes", "gemm"], help="which tables (default: all)")
    args = parser.parse_args()
    install_fakes()
    print(f"Python {sys.version.split()[0]}, torch {torch.__version__}; µs per call, best and "
          f"median of {args.repeats} x {args.calls} calls\n")
    print("| row | µs best | µs median |")
    print("|---|---:|---:|")
    ratios = {}
    tables = {"dsl": dsl_rows, "recipes": recipe_rows, "gemm": gemm_rows}
    for make_rows in (tables[name] for name in args.rows):
        results = measure(make_rows(), args.calls, args.repeats)
        for name, (best, median) in results.items():
            print(f"| {name} | {best:.2f} | {median:.2f} |")
        ratios.update(dsl_ratios(results) if make_rows is dsl_rows else {})
    if ratios:
        print("\nThe DSL's Python over the configured launcher's (best, less an empty call):")
    for name, ratio in ratios.items():
        print(f"- {name}: {ratio:.3f}x")


def dsl_ratios(results: dict) -> dict[str, float]:
    """{DSL row: its best over its configured launcher's best, each less an empty call's}."""
    empty = results["  an empty call (the lambda around each row)"][0]
    pairs = {"launch(x, y, n, a), launch = scale[16] kept (as bench_launch.py calls it)":
             "configured launcher (x, y, n, a): the floor",
             "  its launch(x, y, n), launch = kernel[1] kept (bench_launch.py's DSL row)":
             "bench_launch.py's kernel: configured launcher (x, y, n)"}
    return {dsl.strip(): (results[dsl][0] - empty) / (results[floor][0] - empty)
            for dsl, floor in pairs.items()}


if __name__ == "__main__":
    main()
