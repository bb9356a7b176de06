"""2-D transpose y = x.T of a row-major (m, n) matrix of bf16, f16 or f32 into a row-major
(n, m) one, through a swizzled shared-memory tile.

Pipeline, per block of 4 warps and tile of ROWS x COLS elements of x (ROWS = 128, COLS = 8 * C,
C = 16 / element bytes: one 16-byte access holds C elements and a tile row is 128 bytes):

    x --ld.global.v4.b32--> registers   LOAD: 8 lanes per 128-byte row, 16 rows per pass
      --st.shared.v4.b32--> tile        (row-major, swizzled)
      bar.sync
    tile --ld.shared.v4.b32--> registers   BLOCKS: each thread reads a C x C block of x
      (C rows, C consecutive columns each); lane i of a warp takes row block i
    registers --st.global.v4.b32--> y   the C x C block stored as its transpose: C rows of
      y, C consecutive elements each; 16 or 32 lanes write one 256/512-byte row segment of y

No data moves inside registers: the C x C block a thread read is, value for value, the
transposed block it writes; only the register tensor's layout changes (a relabelling,
`transposed_values`).

The swizzle, picked by `choose_swizzle` with the layout algebra. A 16-byte shared access by
a warp runs in four phases of 8 lanes; a phase is conflict-free when its 8 lanes fall in 8
different 16-byte bank groups (address / 16 mod 8). Composing the tile's layout with each
TV layout gives every lane's address. LOAD's 8 lanes of a phase write the 8 chunks of one
row: distinct with any swizzle. BLOCKS' 8 lanes read row blocks i..i+7 at the same chunk:
rows C*i + k, all 128 bytes apart, so without a swizzle they collide 8-way; Sw<3,3,3> (the
usual 128-byte swizzle, XOR of row % 8) does not help either, since those rows agree mod 8
(row % 8 = k for bf16). What separates them is the row block, bits log2(C) .. log2(C)+2 of
the row, i.e. element-offset bits log2(COLS*C) .. +2. XOR-ing those into the chunk bits
(M = log2 C, unchanged within a 16-byte access) is Sw<3, log2 C, log2 COLS>: Sw<3,3,6> for
16-bit elements, Sw<3,2,5> for f32. `choose_swizzle` finds it by trying the shifts in order
and counting conflicts of both access patterns; `bank_conflicts` is the count.

Constraints: x is a contiguous 2-D CUDA tensor of bf16, f16 or f32 with m, n >= 1; any m, n
are correct (a ragged last tile is masked). 16-byte global accesses need n and m multiples
of 16 and 16-byte aligned pointers (else narrower, masked accesses: correct, slower).
"""
from __future__ import annotations

import functools

import layoutkit as lk
from layoutkit.tools.benchmarking import gbps, interleaved
from layoutkit.tools.dependencies import require_torch

THREADS = 128
ROWS = 128                      # rows of x per tile
ACCESS_BYTES = 16               # ld/st .v4.b32
ROW_BYTES = 128                 # a tile row: 32 banks of 4 bytes
DTYPES = {"bfloat16": lk.bf16, "float16": lk.f16, "float32": lk.f32}
MAX_REGISTERS = 80              # see kernel_for


def tile_shape(dtype: lk.DType) -> tuple[int, int, int]:
    """(C, ROWS, COLS): elements per 16-byte access, and the tile of x a block moves."""
    c = ACCESS_BYTES // dtype.nbytes
    return c, ROWS, ROW_BYTES // dtype.nbytes


@functools.lru_cache(maxsize=None)
def layouts(dtype: lk.DType) -> tuple[lk.TVLayout, lk.TVLayout, lk.TVLayout]:
    """(LOAD, BLOCKS, STORE): TV layouts of 128 threads. LOAD and BLOCKS cover the x tile
    (ROWS, COLS) (index = row + ROWS * col), STORE the y tile (COLS, ROWS) (index = y row +
    COLS * y col); STORE(t, v) is BLOCKS(t, transposed_values[v]) transposed."""
    c, rows, cols = tile_shape(dtype)
    chunks = cols // c                              # 8 chunks of C elements per tile row
    per_pass = THREADS // chunks                    # rows loaded per pass
    load = lk.TVLayout((rows, cols), lk.Layout(((chunks, per_pass), (c, rows // per_pass)),
                                               ((rows * c, 1), (rows, per_pass))))
    blocks_down = rows // c                         # row blocks: lane i takes block i
    across = THREADS // blocks_down                 # column chunks per pass of the threads
    repeat = chunks // across                       # C x C blocks per thread
    blocks = lk.TVLayout((rows, cols), lk.Layout(
        ((blocks_down, across), (c, c, repeat)),
        ((c, rows * c), (rows, 1, rows * c * across))))
    store = lk.TVLayout((cols, rows), lk.Layout(
        ((blocks_down, across), (c, c, repeat)),
        ((cols * c, c), (cols, 1, c * across))))
    return load, blocks, store


@functools.lru_cache(maxsize=None)
def transposed_values(dtype: lk.DType) -> tuple[int, ...]:
    """perm with STORE(t, v) = transpose of BLOCKS(t, perm[v]) for every thread t."""
    _, rows, cols = tile_shape(dtype)
    _, blocks, store = layouts(dtype)
    index = {blocks.layout(0, v): v for v in range(blocks.num_values)}
    perm = []
    for v in range(store.num_values):
        y = store.layout(0, v)
        perm.append(index[y // cols + rows * (y % cols)])    # y (j, i) is x (i, j)
    for t in range(THREADS):                                   # the same for every thread
        for v, w in enumerate(perm):
            y, x = store.layout(t, v), blocks.layout(t, w)
            assert (y % cols, y // cols) == (x // rows, x % rows), (t, v, w)
    return tuple(perm)


def bank_conflicts(smem: lk.ComposedLayout, tv: lk.TVLayout, dtype: lk.DType) -> int:
    """Extra shared-memory wavefronts of a block's 16-byte accesses of `tv` over the tile
    laid out by `smem`: per warp, access and 8-lane phase, the most distinct addresses that
    share a 16-byte bank group (address / 16 mod 8), minus one."""
    c = ACCESS_BYTES // dtype.nbytes
    extra = 0
    for warp in range(tv.num_threads // 32):
        for v in range(0, tv.num_values, c):
            for phase in range(4):
                groups: dict[int, set] = {}
                for lane in range(8 * phase, 8 * phase + 8):
                    address = smem(tv.layout(32 * warp + lane, v)) * dtype.nbytes
                    groups.setdefault(address // ACCESS_BYTES % 8, set()).add(address)
                extra += max(len(a) for a in groups.values()) - 1
    return extra


def smem_layout(dtype: lk.DType, shift: int) -> lk.ComposedLayout:
    c, rows, cols = tile_shape(dtype)
    return lk.ComposedLayout(lk.Swizzle(3, c.bit_length() - 1, shift), 0,
                             lk.Layout((rows, cols), (cols, 1)))


@functools.lru_cache(maxsize=None)
def choose_swizzle(dtype: lk.DType) -> lk.ComposedLayout:
    """The row-major tile swizzled by Sw<3, log2 C, S>, the smallest S >= 3 for which both
    the LOAD writes and the BLOCKS reads are bank-conflict-free (see the module docstring)."""
    load, blocks, _ = layouts(dtype)
    _, rows, cols = tile_shape(dtype)
    for shift in range(3, (rows * cols).bit_length()):
        smem = smem_layout(dtype, shift)
        if smem.cosize() <= rows * cols and bank_conflicts(smem, load, dtype) == 0 and \
                bank_conflicts(smem, blocks, dtype) == 0:
            return smem
    raise AssertionError(f"transpose: no conflict-free swizzle for {dtype}")


def _body(dtype: lk.DType):
    def transpose(x, y, m, n, ROWS_ON_X):
        load, blocks, store = layouts(dtype)
        _, rows, cols = tile_shape(dtype)
        tile = lk.shared_tensor(choose_swizzle(dtype), dtype)
        bx, by = lk.block_id(0), lk.block_id(1)
        i, j = (bx, by) if ROWS_ON_X else (by, bx)            # tile (i, j) of x
        X = lk.global_tensor(x, lk.Layout((m, n), (n, 1))).tile((rows, cols), (i, j))
        lk.store(tile.partition(load), lk.load(X.partition(load)))
        lk.barrier()
        v = lk.load(tile.partition(blocks))
        Y = lk.global_tensor(y, lk.Layout((n, m), (m, 1))).tile((cols, rows), (j, i))
        values = [v.values[w] for w in transposed_values(dtype)]
        lk.store(Y.partition(store), lk.RegisterTensor(dtype, store, values))

    transpose.__name__ = transpose.__qualname__ = f"transpose_{dtype}"
    transpose.__annotations__ = {"x": lk.Pointer[dtype], "y": lk.Pointer[dtype], "m": lk.i32,
                                 "n": lk.i32, "ROWS_ON_X": lk.constexpr}
    return transpose


@functools.lru_cache(maxsize=None)
def kernel_for(dtype: lk.DType) -> lk.Kernel:
    """The transpose kernel for elements of `dtype` (bf16, f16 or f32). The register cap is
    ptxas's: left to choose, it gives a ragged shape's element-wise masked path 72 registers and
    spills 8 bytes; at 80 neither path spills (the aligned one takes 72 instead of 64)."""
    return lk.kernel(_body(dtype), num_warps=THREADS // 32, max_registers=MAX_REGISTERS)


def grid(m: int, n: int, dtype: lk.DType) -> tuple[tuple[int, int], bool]:
    """(grid, ROWS_ON_X): tiles of x, the longer count on grid x (2**31 - 1 blocks there,
    65535 on y)."""
    _, rows, cols = tile_shape(dtype)
    down, across = -(-m // rows), -(-n // cols)
    return ((down, across), True) if down >= across else ((across, down), False)


def check_arguments(x, out=None) -> lk.DType:
    """The layoutkit element type of x, after checking x (and `out`, when given) as
    transpose() needs them; raises TypeError / ValueError naming the argument and the rule."""
    if not all(hasattr(x, a) for a in ("dtype", "shape", "is_cuda", "is_contiguous")):
        raise TypeError(f"transpose: x must be a torch tensor, got {type(x).__name__}")
    name = str(x.dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise TypeError(f"transpose: x has dtype {x.dtype}; supported: "
                        f"{', '.join('torch.' + d for d in DTYPES)}")
    if not x.is_cuda:
        raise ValueError(f"transpose: x is on {x.device}; it must be a CUDA tensor")
    if len(x.shape) != 2 or not x.is_contiguous():
        raise ValueError(f"transpose: x must be a contiguous 2-D (row-major) matrix, got shape "
                         f"{tuple(x.shape)} with strides {tuple(x.stride())}")
    m, n = x.shape
    if out is not None and (str(getattr(out, "dtype", None)) != str(x.dtype) or
                            tuple(getattr(out, "shape", ())) != (n, m) or
                            getattr(out, "device", None) != x.device or
                            not out.is_contiguous()):
        got = getattr(out, "dtype", type(out).__name__)
        raise ValueError(f"transpose: out must be a contiguous {x.dtype} tensor of shape "
                         f"({n}, {m}) on {x.device}, got {got} "
                         f"{tuple(getattr(out, 'shape', ()))} on {getattr(out, 'device', '?')}")
    return DTYPES[name]


_PLANS: dict = {}       # (x.shape, x.dtype) -> (kernel[grid] or None when empty, m, n, ROWS_ON_X)
MAX_PLANS = 256


def _plan(x, dtype: lk.DType):
    """What transpose launches for a (checked) x of this shape and dtype; kept per both."""
    m, n = x.shape
    plan = (None, m, n, True)
    if m and n:
        blocks, rows_on_x = grid(m, n, dtype)
        plan = (kernel_for(dtype)[blocks], m, n, rows_on_x)
    if len(_PLANS) >= MAX_PLANS:
        _PLANS.clear()
    _PLANS[(x.shape, x.dtype)] = plan
    return plan


def _is_plain_output(x, out, tensor) -> bool:
    """Whether out is certainly a contiguous tensor of type `tensor` (torch.Tensor) that can
    hold x.t() on x's device (the fast check)."""
    return type(out) is tensor and out.dtype is x.dtype and out.is_contiguous() and \
        out.shape == x.shape[::-1] and out.is_cuda and out.get_device() == x.get_device()


def transpose(x, out=None):
    """x.t().contiguous() for a contiguous 2-D CUDA tensor of bf16, f16 or f32 (written into
    `out`, shape (n, m), when given)."""
    torch = require_torch("recipes.transpose.transpose")
    plan = _PLANS.get((x.shape, x.dtype)) if type(x) is torch.Tensor else None
    if plan is None or not (x.is_cuda and x.is_contiguous()) or \
            not (out is None or _is_plain_output(x, out, torch.Tensor)):
        plan = _plan(x, check_arguments(x, out))
    launch, m, n, rows_on_x = plan
    if out is None:
        out = torch.empty((n, m), dtype=x.dtype, device=x.device)
    if launch is not None:
        launch(x, out, m, n, rows_on_x)
    return out


def compile_default() -> dict:
    """PTX of the default specializations (no GPU): bf16 and f32, aligned 4096 x 4096."""
    result = {}
    for dtype in (lk.bf16, lk.f32):
        ptr = lk.Pointer[dtype]
        result[f"transpose {dtype}"] = kernel_for(dtype).ptx(ptr, ptr, 4096, 4096, True)
    return result


def check_cpu(seed: int = 0) -> float:
    """Run the kernel on the CPU interpreter (layoutkit.dsl.interpreter.check_on_cpu, race
    checking on) for a small ragged shape of each dtype, both grid orientations, and compare
    with numpy's transpose exactly (returns 0.0; AssertionError on any difference)."""
    import numpy as np

    from layoutkit.dsl.interpreter import check_on_cpu, from_bf16, to_bf16
    rng = np.random.default_rng(seed)
    host = {"bfloat16": to_bf16, "float16": lambda v: v.astype(np.float16),
            "float32": lambda v: v.astype(np.float32)}
    shapes = {"bfloat16": (130, 20), "float16": (20, 130), "float32": (3, 5)}   # grid x, y
    for name, dtype in DTYPES.items():
        m, n = shapes[name]
        x = host[name](rng.standard_normal((m, n)))
        blocks, rows_on_x = grid(m, n, dtype)
        want = (from_bf16(x) if name == "bfloat16" else x).T     # bf16: bit patterns
        check_on_cpu(kernel_for(dtype), blocks, x, np.zeros((n, m), x.dtype), m, n,
                     rows_on_x, expect={"y": want}, tolerance=0.0)
    return 0.0


def check(shapes=((1, 1), (3, 5), (129, 65), (1000, 777), (256, 4096), (4096, 48), (17, 3000),
                  (2048, 2048)), seed: int = 0) -> float:
    """Transpose random matrices of every dtype and compare with x.t() exactly (returns 0.0;
    AssertionError on any difference or a write outside y)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for m, n in shapes:
            x = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
            guard = torch.full((m * n + 64,), float("nan"), device="cuda", dtype=dtype)
            y = guard[:m * n].view(n, m)
            transpose(x, y)
            assert torch.equal(y, x.t()), f"transpose {dtype} ({m}, {n}): wrong values"
            assert torch.isnan(guard[m * n:]).all(), f"transpose {dtype} ({m}, {n}): wrote past y"
    return 0.0


def benchmark(shapes=((4096, 4096), (8192, 8192), (16384, 8192), (8192, 16384)),
              reps: int = 50) -> list:
    """GB/s (one read and one write of x) of this transpose, of torch's x.t().contiguous()
    and of a device-to-device copy of the same bytes (y.copy_(x): the bandwidth this GPU
    reaches), measured in the same run, interleaved (layoutkit.tools.benchmarking: CUDA events, L2
    flushed before each call, medians); prints and returns the rows."""
    import torch
    rows = []
    print(f"{'dtype':>9} {'shape':>14} {'copy GB/s':>10} {'layoutkit':>10} {'torch':>8} "
          f"{'lk/copy':>8} {'lk/torch':>9}")
    for dtype in (torch.bfloat16, torch.float32):
        for m, n in shapes:
            x = torch.randn(m, n, device="cuda").to(dtype)
            y = torch.empty(n, m, device="cuda", dtype=dtype)
            flat = torch.empty_like(x)
            times = interleaved({"copy": lambda: flat.copy_(x),
                                 "layoutkit": lambda: transpose(x, y),
                                 "torch": lambda: x.t().contiguous()}, reps=reps)
            nbytes = 2 * x.numel() * x.element_size()
            rate = {name: gbps(nbytes, t.median_ms) for name, t in times.items()}
            row = {"dtype": str(dtype).removeprefix("torch."), "m": m, "n": n,
                   **{f"{name}_gbps": value for name, value in rate.items()},
                   "vs_copy": rate["layoutkit"] / rate["copy"],
                   "vs_torch": rate["layoutkit"] / rate["torch"]}
            rows.append(row)
            print(f"{row['dtype']:>9} {f'({m}, {n})':>14} {rate['copy']:10.0f} "
                  f"{rate['layoutkit']:10.0f} {rate['torch']:8.0f} {row['vs_copy']:8.2f} "
                  f"{row['vs_torch']:9.2f}")
    return rows


if __name__ == "__main__":
    check()
    benchmark()
