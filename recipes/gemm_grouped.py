"""Grouped bf16 GEMM for Hopper (mixture-of-experts layers): G problems C_g = A_g @ B_g in one
persistent launch, bf16 in, f32 accumulate, bf16 out.

Two forms:

    gemm_grouped(a, b, offsets)      the MoE token layout: a (T, K), the groups' rows
                                     concatenated, group g = rows offsets[g] .. offsets[g+1]-1;
                                     b (G, K, N), N-major (contiguous) or K-major (strides
                                     (N*K, 1, K), e.g. w.transpose(1, 2) of (G, N, K) weights);
                                     offsets (G + 1,) int32 on the GPU -> c (T, N)
    gemm_grouped([a0, a1, ...], [b0, b1, ...])
                                     a_g (m_g, K), b_g (K, N): the same K and N for every
                                     group, any m_g (0 included) -> [c0, c1, ...]

The group sizes of the packed form are read on the GPU only (no host sync: they may come from a
router kernel): the kernel walks the offsets to count and place its tiles
(recipes/_gemm_grouped_kernel.py). Rows of c that belong to no group (before offsets[0] or
past offsets[G]) are not written. The list form is a convenience over the packed one: it
concatenates the a_g and stacks the b_g (copies) and builds the offsets on the host; different
K or N per group is not supported (one tensor map per operand: a ValueError says so).

What is checked where: the host checks Python types, ranks, dtypes (bf16 operands, int32
offsets), shapes (a's K = b's K, G + 1 offsets for G matrices), the config, `out` (shape,
dtype, no overlap with an input) and devices (one CUDA device), each mistake a TypeError or
ValueError naming it, before anything reaches the GPU. The offsets' values cannot be checked
there without a sync; the kernel clamps them (0 <= offsets[g] <= offsets[g+1] <= T after
clamping), so decreasing, negative or too-large offsets give wrong rows, never a write outside
c or a read outside a and b. `check_offsets` is the opt-in host check (it synchronises).

Config: recipes/_gemm_kernel.Config with CLUSTER = 1 (a cluster pair shares B only when both
its tiles are in one group; not done), BM = 128, BN, STAGES, GROUP_M raster within a group.
"""
from __future__ import annotations

import layoutkit as lk
from layoutkit.tools.dependencies import require_torch
from recipes import _gemm_host as host
from recipes._device import sm_count
from recipes._gemm_grouped_kernel import BM, gemm_grouped_kernel
from recipes._gemm_kernel import Config, row_elements

ATOM_K = row_elements(lk.bf16)     # BK: bf16 elements in one 128-byte swizzled row
ALIGN_ELEMENTS = host.TMA_ALIGN_BYTES // lk.bf16.nbytes
WHAT = "gemm_grouped"
DEFAULT = Config(BN=256, STAGES=4, GROUP_M=8, CLUSTER=1)
CONFIGS = (DEFAULT, Config(BN=128, STAGES=6, GROUP_M=8, CLUSTER=1),
           Config(BN=256, STAGES=3, GROUP_M=1, CLUSTER=1))


def grid_for(total: int, groups: int, n: int, cfg: Config, units: int) -> int:
    """CTAs of the persistent launch (the GRID constexpr): `units` (resident CTAs) or, if fewer,
    the power of two at or above the most tiles the groups can have (ceil(m_g / BM) summed is
    at most total // BM + groups tile rows): a batch's token count changes the grid, and so the
    specialization, in at most log2(units) + 1 steps."""
    most = max(1, (total // BM + groups) * -(-n // cfg.BN))
    return min(units, 1 << (most - 1).bit_length())


def kernel_arguments(a, b2, c, offsets, major: str, cfg: Config, grid: int):
    """((grid,), positional arguments, constexprs) of one launch: a (T, K), b2 the stacked B as
    2-D (G*K, N) (major "N") or (G*N, K) (major "K"), c (T, N), offsets (G + 1,) int32, as CUDA
    tensors, numpy arrays (the CPU interpreter) or lk.TensorSpecs."""
    return (grid,), (a, b2, c, offsets), dict(GRID=grid, B_MAJOR=major, BN=cfg.BN,
                                              STAGES=cfg.STAGES, GROUP_M=cfg.GROUP_M)


# ---- host checks -----------------------------------------------------------------------------
def check_config(config) -> Config:
    """`config` (None: DEFAULT) as recipes._gemm_host.check_config checks it, and CLUSTER 1."""
    host.check_config(WHAT, config)
    if config is not None and config.CLUSTER != 1:
        raise ValueError(f"{WHAT}: config {config} does not fit the kernel: CLUSTER = "
                         f"{config.CLUSTER} (1: the grouped kernel runs one CTA per unit)")
    return config or DEFAULT


def check_inputs(a, b, offsets, out, config,
                 cuda: bool = True) -> tuple[int, int, int, int, Config]:
    """Validate the packed form's arguments (torch tensors; CPU and meta tensors reach every
    rule); returns (T, K, N, G, config). Each mistake is a TypeError (a Python type, a dtype) or a
    ValueError (a rank, a shape, the config, an overlap, a device) naming the argument. Not
    `cuda` (fake and CPU-interpreter callers): one device, any one."""
    torch = require_torch(f"recipes.gemm_grouped.{WHAT}")
    host.require_matrix(WHAT, "a", a, "total_tokens x K")
    host.require_tensor(WHAT, "b", b)
    if b.dim() != 3:
        raise ValueError(f"{WHAT}: b is a 3-D tensor (groups x K x N), got one of shape "
                         f"{tuple(b.shape)}")
    host.require_tensor(WHAT, "offsets", offsets)
    if offsets.dim() != 1 or offsets.shape[0] < 1:
        raise ValueError(f"{WHAT}: offsets is a 1-D tensor of groups + 1 row offsets, got one "
                         f"of shape {tuple(offsets.shape)}")
    host.require_dtype(WHAT, "a", a, (torch.bfloat16,))
    host.require_dtype(WHAT, "b", b, (torch.bfloat16,))
    host.require_dtype(WHAT, "offsets", offsets, (torch.int32,))
    (t, k), (g, kb, n) = a.shape, b.shape
    if kb != k:
        raise ValueError(f"{WHAT}: a is total_tokens x K and b is groups x K x N, got a of "
                         f"shape {tuple(a.shape)} and b of shape {tuple(b.shape)} (K = {k} "
                         f"and {kb})")
    if offsets.shape[0] != g + 1:
        raise ValueError(f"{WHAT}: offsets holds groups + 1 = {g + 1} row offsets for b's "
                         f"{g} groups, got {offsets.shape[0]}")
    cfg = check_config(config)
    tensors = {"a": a, "b": b, "offsets": offsets}
    if out is not None:
        host.require_out(WHAT, out, (t, n), torch.bfloat16)
        host.require_no_overlap(WHAT, out, tensors)
        tensors["out"] = out
    if cuda:
        host.require_one_cuda_device(WHAT, tensors)
    else:
        require_one_device(tensors)
    return t, k, n, g, cfg


def require_one_device(tensors: dict) -> None:
    """recipes._gemm_host.require_one_cuda_device's first rule alone: every tensor on the
    first one's device."""
    (first, x), *rest = tensors.items()
    for name, y in rest:
        if y.device != x.device:
            raise ValueError(f"{WHAT}: {name} is on {y.device} and {first} on {x.device}; "
                             "every tensor of one call is on one device")


def check_offsets(offsets, total: int) -> None:
    """The opt-in host check of the offsets' values (it copies them to the host: a sync):
    ValueError unless 0 <= offsets[0] <= offsets[1] <= ... <= offsets[G] <= total."""
    values = offsets.tolist()
    bad = next((i for i in range(len(values) - 1) if values[i] > values[i + 1]), None)
    if values[0] < 0 or values[-1] > total or bad is not None:
        where = f"offsets[{bad}] = {values[bad]} > offsets[{bad + 1}] = {values[bad + 1]}" \
            if bad is not None else f"offsets[0] = {values[0]}, offsets[-1] = {values[-1]}"
        raise ValueError(f"{WHAT}: offsets are non-decreasing in 0..{total} (the rows of a), "
                         f"got {where}")


# ---- operands ---------------------------------------------------------------------------------
def stacked_b(b, columns: int | None = None):
    """(major, b2): b (G, K, N) as the kernel's 2-D operand, TMA-ready. N-major b becomes
    (G*K, N) when K is a multiple of BK; otherwise (and for K-major b) the kernel reads
    (G*N, K), K contiguous, so the k-tail is clipped by TMA per row (an N-major b with a ragged
    K is transposed into a copy: its k-tail would read the next group's rows). `columns`: the
    kernel's N, c's columns (None: N; more where c's rows run on to a whole 16-byte chunk,
    host.tma_output): a K-major b2 then has that many rows per group, the extra ones zero (an
    N-major b2's columns past N read as zeros: TMA's fill)."""
    g, k, n = b.shape
    if (b.stride(2) == 1 or n == 1) and k % ATOM_K == 0:
        return "N", host.tma_ready(b.reshape(g * k, n))
    rows = b.transpose(1, 2)
    if columns is not None and columns > n:             # a copy with zero rows per group
        padded = rows.new_zeros(g, columns, k)
        padded[:, :n] = rows
        rows, n = padded, columns
    return "K", host.tma_ready(rows.reshape(g * n, k))


_sm_count = sm_count


def launch(grid, args, constexprs) -> None:
    """gemm_grouped_kernel[grid](*args, **constexprs): the one place the host path launches."""
    gemm_grouped_kernel[grid](*args, **constexprs)


def packed(a, b, offsets, out=None, config=None, *, units=None, run=None, cuda: bool = True):
    """The packed form (module docstring) with where it runs: `units` resident CTAs (None: the
    device's SM count), `run(grid, args, constexprs)` the launch (None: `launch`; the CPU
    interpreter for layoutkit.torch's CPU path), `cuda` whether the tensors must be on a CUDA
    device."""
    torch = require_torch(f"recipes.gemm_grouped.{WHAT}")
    t, k, n, g, cfg = check_inputs(a, b, offsets, out, config, cuda)
    if out is None:
        out = torch.empty(t, n, device=a.device, dtype=torch.bfloat16)
    if t == 0 or n == 0 or g == 0:
        return out
    if k == 0:                      # every group's product is 0 (rows of no group too)
        return out.zero_()
    # the kernel's TMA stores and C's columns; a copy keeps out's rows of no group
    c_stored, c = host.tma_output(out, keep=True)
    major, b2 = stacked_b(b, c_stored.shape[1])
    a_op = host.tma_ready(a)
    units = _sm_count(a.device) if units is None else units
    grid, args, constexprs = kernel_arguments(a_op, b2, c_stored, offsets.contiguous(), major,
                                              cfg, grid_for(t, g, n, cfg, units))
    (run or launch)(grid, args, constexprs)
    if c.data_ptr() != out.data_ptr():
        out.copy_(c)
    return out


def _listed(a_list, b_list, config):
    """The list form (module docstring): checks, packs and runs the packed form."""
    torch = require_torch(f"recipes.gemm_grouped.{WHAT}")
    if not isinstance(b_list, (list, tuple)):
        raise TypeError(f"{WHAT}: a list of a_g takes a list of b_g (one per group), got b of "
                        f"type {type(b_list).__name__}")
    for name, items in (("a", a_list), ("b", b_list)):
        if len(items) == 0:
            raise ValueError(f"{WHAT}: {name} is an empty list; give one matrix per group")
        for i, x in enumerate(items):
            host.require_matrix(WHAT, f"{name}[{i}]", x, "m_g x K" if name == "a" else "K x N")
            host.require_dtype(WHAT, f"{name}[{i}]", x, (torch.bfloat16,))
    if len(a_list) != len(b_list):
        raise ValueError(f"{WHAT}: {len(a_list)} matrices in a and {len(b_list)} in b; one "
                         "pair per group")
    k, n = b_list[0].shape
    for i, (x, w) in enumerate(zip(a_list, b_list)):
        if tuple(w.shape) != (k, n) or x.shape[1] != k:
            raise ValueError(f"{WHAT}: every group has b_g of shape (K, N) = ({k}, {n}) and "
                             f"a_g of K = {k} columns (one K and N for all groups), got a[{i}] "
                             f"of shape {tuple(x.shape)} and b[{i}] of shape {tuple(w.shape)}")
    check_config(config)
    host.require_one_cuda_device(WHAT, {**{f"a[{i}]": x for i, x in enumerate(a_list)},
                                        **{f"b[{i}]": w for i, w in enumerate(b_list)}})
    sizes = [x.shape[0] for x in a_list]
    bounds = [0]
    for m in sizes:
        bounds.append(bounds[-1] + m)
    device = a_list[0].device
    offsets = torch.tensor(bounds, dtype=torch.int32).to(device, non_blocking=True)
    c = packed(torch.cat(list(a_list)), torch.stack(list(b_list)), offsets, None, config)
    return list(torch.split(c, sizes))


def gemm_grouped(a, b, offsets=None, out=None, config: Config | None = None):
    """Grouped GEMM (module docstring): packed `gemm_grouped(a, b, offsets, out=None)` -> c
    (T, N) bf16, written into `out` when given (rows of no group keep out's values); or
    `gemm_grouped([a0, ...], [b0, ...])` -> [c0, ...]. Arguments are checked first."""
    require_torch(f"recipes.gemm_grouped.{WHAT}")
    if isinstance(a, (list, tuple)):
        if offsets is not None or out is not None:
            raise ValueError(f"{WHAT}: the list form takes no offsets and no out (the groups "
                             "are the lists' entries)")
        return _listed(a, b, config)
    if offsets is None:
        raise TypeError(f"{WHAT}: a packed a (total_tokens x K) takes offsets (groups + 1 "
                        "int32 row offsets on the GPU); for separate matrices pass lists")
    return packed(a, b, offsets, out, config)


# ---- references, compile, checks ------------------------------------------------------------
def reference(a, b, offsets):
    """float64 numpy C of the packed form: a (T, K), b (G, K, N), offsets (G + 1,) (array-likes
    of numbers); rows of no group are 0."""
    import numpy as np
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    c = np.zeros((a.shape[0], b.shape[2]))
    for g in range(b.shape[0]):
        lo, hi = int(offsets[g]), int(offsets[g + 1])
        c[lo:hi] = a[lo:hi] @ b[g]
    return c


def compile_default() -> dict[str, str]:
    """PTX of the default config for both B layouts (8 experts, 16k tokens, N = 14336,
    K = 4096)."""
    t, g, n, k = 16384, 8, 14336, 4096
    A, C, O = (lk.TensorSpec(lk.bf16, (t, k)), lk.TensorSpec(lk.bf16, (t, n)),
               lk.TensorSpec(lk.i32, (g + 1,)))
    out = {}
    for major, b2 in (("N", lk.TensorSpec(lk.bf16, (g * k, n))),
                      ("K", lk.TensorSpec(lk.bf16, (g * n, k)))):
        grid, args, constexprs = kernel_arguments(A, b2, C, O, major, DEFAULT, 132)
        name = f"gemm_grouped_{major}major_{BM}x{DEFAULT.BN}x{ATOM_K}_s{DEFAULT.STAGES}"
        out[name] = gemm_grouped_kernel.ptx(*args, **constexprs)
    return out


# (group sizes, rows of no group before and after them, K, N, B major, grid, config): ragged
# groups, an empty one and one of 1 row, a group crossing a tile (130 rows: its second tile
# stores 2 rows by the masked path), a ragged K (72: zero-filled k-tail) and N (72, 40), a
# persistent CTA taking several tiles, rows of no group (left as they were: zeros)
CPU_CASES = (((130, 0, 1, 70), (0, 0), 64, 72, "N", 2,
              Config(BN=64, STAGES=2, GROUP_M=2, CLUSTER=1)),
             ((3, 140, 0), (0, 0), 72, 40, "K", 3, Config(BN=64, STAGES=3, GROUP_M=1, CLUSTER=1)),
             ((0, 65), (5, 7), 64, 136, "N", 1, Config(BN=128, STAGES=2, GROUP_M=8, CLUSTER=1)))


def check_cpu(seed: int = 0, cases=CPU_CASES) -> float:
    """Run the kernel on the CPU interpreter (race checking on) on small ragged groups, both B
    layouts, rows padded to 8 elements as gemm_grouped pads them; compares with numpy in
    float64 (every row of c: rows of no group must stay 0) and returns the worst error
    relative to the largest |c| (AssertionError past 2**-7)."""
    import numpy as np

    from layoutkit.dsl.interpreter import check_on_cpu, from_bf16, to_bf16
    rng = np.random.default_rng(seed)

    def padded(x):                       # TMA rows: 16-byte multiples (as tma_ready pads)
        out = np.zeros((x.shape[0], host.round_up(x.shape[1], ALIGN_ELEMENTS)), np.uint16)
        out[:, :x.shape[1]] = x
        return out[:, :x.shape[1]]
    worst = 0.0
    for sizes, (lead, tail), k, n, major, grid, cfg in cases:
        offsets = (lead + np.concatenate([[0], np.cumsum(sizes)])).astype(np.int32)
        g, t = len(sizes), int(offsets[-1]) + tail
        a = to_bf16(rng.standard_normal((t, k)))
        b = to_bf16(rng.standard_normal((g, k, n)))
        want = reference(from_bf16(a), from_bf16(b), offsets)
        b2 = b.reshape(g * k, n) if major == "N" else b.transpose(0, 2, 1).reshape(g * n, k)
        c = padded(np.zeros((t, n), np.uint16))
        launch, args, constexprs = kernel_arguments(padded(a), padded(b2), c, offsets, major,
                                                    cfg, grid)
        worst = max(worst, check_on_cpu(gemm_grouped_kernel, launch, *args, **constexprs,
                                        expect={"c": want}, tolerance=2 ** -7,
                                        seeds=(seed,)))
    return worst


def random_groups(gen, groups: int, total: int) -> list[int]:
    """`groups` sizes summing to `total` (torch generator `gen`), skewed, with an empty group
    and a group of one row where groups >= 3."""
    import torch
    weights = torch.rand(groups, generator=gen) ** 3
    sizes = (weights / weights.sum() * total).floor().long().tolist()
    if groups >= 3:
        sizes[1], sizes[2] = 0, 1
    sizes[0] += total - sum(sizes)
    return sizes


def check(seed: int = 0) -> float:
    """Random ragged groups on the GPU (empty groups, groups of 1 row, G = 1 and 64, both B
    layouts, every config) against torch in float64; returns the worst relative error
    (AssertionError beyond bf16 tolerance)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    worst = 0.0
    cases = [(1, 300, 256, 128, False), (5, 1000, 520, 264, True), (64, 3000, 384, 256, False),
             (8, 4096, 1024, 512, True), (3, 200, 72, 100, False), (64, 64, 128, 64, True)]
    for i, (g, total, n, k, kmajor) in enumerate(cases):
        cfg = CONFIGS[i % len(CONFIGS)]
        sizes = random_groups(gen, g, total)
        a, b, offsets = problem(gen, sizes, k, n, kmajor)
        out = torch.full((total, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        got = gemm_grouped(a, b, offsets, out=out, config=cfg).double()
        want = reference_torch(a, b, offsets)
        assert not got.isnan().any(), f"case {i}: an output element was not written"
        err = ((got - want).norm() / want.norm().clamp_min(1e-30)).item()
        assert err < 1e-2, f"case {i} ({g} groups {sizes[:4]}..., {cfg}): error {err:.3g}"
        worst = max(worst, err)
    return worst


def problem(gen, sizes, k: int, n: int, kmajor: bool):
    """Random CUDA operands of the packed form: a (sum(sizes), K), b (G, K, N) (K-major
    storage where `kmajor`), offsets int32; drawn on the generator's device (a CUDA one for
    large operands)."""
    import torch
    total = sum(sizes)
    a = torch.randn(total, k, generator=gen, device=gen.device).to("cuda", torch.bfloat16)
    b = torch.randn(len(sizes), k, n, generator=gen, device=gen.device).to("cuda",
                                                                         torch.bfloat16)
    if kmajor:
        b = b.transpose(1, 2).contiguous().transpose(1, 2)
    bounds = [0]
    for m in sizes:
        bounds.append(bounds[-1] + m)
    return a, b, torch.tensor(bounds, dtype=torch.int32, device="cuda")


def reference_torch(a, b, offsets):
    """float64 torch C of the packed form (rows of no group 0)."""
    import torch
    c = torch.zeros(a.shape[0], b.shape[2], device=a.device, dtype=torch.float64)
    bounds = offsets.tolist()
    for g in range(b.shape[0]):
        lo, hi = bounds[g], bounds[g + 1]
        c[lo:hi] = a[lo:hi].double() @ b[g].double()
    return c


def grouped_mm_of_torch():
    """torch's grouped GEMM (torch._grouped_mm: 2-D a, 3-D b, int32 group ends) or None where
    this torch has none."""
    import torch
    return getattr(torch, "_grouped_mm", None)


def bench_case(sizes, n: int, k: int, kmajor: bool, reps: int = 20) -> dict:
    """One same-run comparison on the packed groups `sizes` (K x N experts, B K-major where
    `kmajor`): gemm_grouped, a loop of torch.matmul over the groups (sizes known on the host)
    and torch._grouped_mm where it exists and runs on these operands, interleaved, L2 flushed
    (layoutkit.tools.benchmarking). Each result is checked against the torch loop first.
    Returns TFLOP/s per candidate and the reason torch's grouped mm is absent (or None)."""
    import torch

    from layoutkit.tools.benchmarking import interleaved, tflops
    gen = torch.Generator(device="cuda").manual_seed(len(sizes) * 7919 + sum(sizes))
    a, b, offsets = problem(gen, sizes, k, n, kmajor)
    bounds = offsets.tolist()
    loop_out = torch.empty(a.shape[0], n, device="cuda", dtype=torch.bfloat16)

    def torch_loop():
        for g in range(len(sizes)):
            lo, hi = bounds[g], bounds[g + 1]
            if hi > lo:
                torch.matmul(a[lo:hi], b[g], out=loop_out[lo:hi])
        return loop_out
    candidates = {"layoutkit": lambda: gemm_grouped(a, b, offsets), "torch loop": torch_loop}
    want = torch_loop().double()
    scale = want.norm().clamp_min(1e-30)
    absent = None
    grouped_mm, ends = grouped_mm_of_torch(), offsets[1:].contiguous()
    if grouped_mm is None:
        absent = "this torch has no torch._grouped_mm"
    else:
        try:
            err = ((grouped_mm(a, b, offs=ends).double() - want).norm() / scale).item()
            if not err < 1e-2:
                absent = f"torch._grouped_mm differs from the loop by {err:.3g}"
            else:
                candidates["torch._grouped_mm"] = lambda: grouped_mm(a, b, offs=ends)
        except Exception as exc:         # noqa: BLE001 - reported, not raised
            absent = f"torch._grouped_mm refused these operands: {str(exc).splitlines()[0]}"
    err = ((gemm_grouped(a, b, offsets).double() - want).norm() / scale).item()
    assert err < 1e-2, f"gemm_grouped on {describe(sizes)} x {n}x{k}: error {err:.3g}"
    times = interleaved(candidates, reps=reps)
    flops = 2 * sum(sizes) * n * k
    return {"groups": describe(sizes), "N": n, "K": k, "B": "K-major" if kmajor else "N-major",
            "tflops": {name: tflops(flops, t.median_ms) for name, t in times.items()},
            "grouped_mm_absent": absent}


def describe(sizes) -> str:
    """'8 x 2048' for equal sizes, else '8 groups, 16384 rows (max 9000, min 0)'."""
    if len(set(sizes)) == 1:
        return f"{len(sizes)} x {sizes[0]}"
    return f"{len(sizes)} groups, {sum(sizes)} rows (max {max(sizes)}, min {min(sizes)})"


def benchmark(reps: int = 20) -> list[dict]:
    """A short same-run table (benchmarks/bench_gemm_grouped.py has the full one): 8 experts of
    16k tokens, uniform and skewed, both B layouts, (N, K) = (14336, 4096)."""
    import torch
    rows = []
    for sizes in ([2048] * 8, random_groups(torch.Generator().manual_seed(1), 8, 16384)):
        for kmajor in (False, True):
            row = bench_case(sizes, 14336, 4096, kmajor, reps)
            ours = row["tflops"]["layoutkit"]
            print(f"{row['groups']} N={row['N']} K={row['K']} {row['B']}: "
                  + ", ".join(f"{name} {x:.1f}" for name, x in row["tflops"].items())
                  + f" TFLOP/s ({ours / row['tflops']['torch loop']:.3f}x the loop)")
            rows.append(row)
    return rows
