"""The device side the row-kernel recipes rmsnorm.py, softmax_backward.py and
layernorm_backward.py share: the work split of a row over lanes, warps and a cluster's CTAs (any
dtype), its views, the row sums (across a cluster through a global scratch), the shared-memory
accumulator of a persistent backward pass, the deterministic column-sum kernel of per-CTA
partials (a weight's gradient), and one lk.Kernel per dtype, block size and cluster. Their host
side (argument checks, the persistent grid, CPU-interpreter runs, benchmark tables) is
recipes/_rowwise.py.

recipes/_row_split.py is the forward softmax / layernorm's split (bf16, with the heuristic
measured on the H200); this is its generalisation to every dtype and to persistent backward
kernels, on the same TV layout (`_row_split.row_layout`) and the same cluster exchange.

The work split (`split`), for rows of n columns of a dtype of `itemsize` bytes, at most
`values` f32 values a thread (the registers after the cast) and `max_threads` threads a row:

    a thread owns K chunks of C consecutive columns (C = 16 / itemsize: 16-byte accesses, or
    fewer for a row too short to give every thread a whole chunk), chunks C * P apart (P: the
    threads of a row, a power of two >= min_threads);
    CLUSTER = ceil(n / (max_threads * values)) CTAs per row (a thread-block cluster along x,
    <= 8, the portable size), CTA r owning columns [r * COLS, (r + 1) * COLS);
    P the fewest threads that hold the CTA's columns in <= values a thread, K as small as
    covers them (a ragged n idles at most a fraction 1/K of the chunks, not half the threads
    of a power-of-two tile);
    ROWS = cta_threads / P rows share a CTA when a row needs fewer threads (whole warps), fewer
    when a small m would leave fewer than target_ctas CTAs (more SMs busy).

Row sums (`row_sums`): lk.reduce_sum over the CTA's part of each row (in-thread tree, shuffles,
shared memory across warps); with CLUSTER > 1 thread 0 of each CTA writes its part to
scratch[row, slot, rank] (f32, global), `lk.sm90.cluster_sync()` (barrier.cluster arrive
.release / wait .acquire orders global memory: ptxas emits MEMBAR.ALL.GPU before the arrive)
and every thread adds the CLUSTER parts in rank order, so every CTA of the cluster holds the
same, deterministic sum. A row's slots are its own: never reused within a launch.

Accesses: n = VEC * nv with VEC = gcd(n, C) a constexpr and nv the kernel's integer, so the row
stride is provably a multiple of VEC and every access VEC values wide (16 bytes when n % C ==
0; narrower, down to scalar, for odd n; correct for every n).

Weight gradients: a persistent CTA (as many as are resident, `resident_ctas`) accumulates its
rows' contributions in f32 in shared memory (`Accumulator`: registers are the scarce resource
of a backward pass), writes one partial row summed over its tile's rows, and `column_sum` adds
the partials of each column in a fixed order: deterministic, no atomics.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import layoutkit as lk
from recipes import _row_split

CHUNK_BYTES = 16                 # one vector access
WARP = 32
MAX_THREADS = 1024               # per CTA
MAX_CLUSTER = _row_split.MAX_CLUSTER   # the portable cluster size of sm_90
TARGET_CTAS = _row_split.TARGET_CTAS   # fewer rows per CTA below this many CTAs


@dataclass(frozen=True)
class RowSplit:
    """How a row of n columns is spread: P threads per row (the CTA's part of it), ROWS rows per
    CTA, each lane K chunks of C columns (per sub-tile), CLUSTER CTAs per row; VEC the access
    width."""

    P: int
    ROWS: int
    C: int
    K: int
    CLUSTER: int
    VEC: int
    SUBS: int = 1       # sub-tiles of P * C * K columns a CTA walks in turn (a kernel's choice)

    @property
    def num_warps(self) -> int:
        return self.P * self.ROWS // WARP

    @property
    def cols(self) -> int:
        """Columns of one CTA (a cluster covers CLUSTER * cols)."""
        return self.P * self.C * self.K * self.SUBS

    def constexprs(self) -> dict:
        """The kernels' constexprs (SUBS is added by the kernels that walk sub-tiles)."""
        return {"P": self.P, "ROWS": self.ROWS, "C": self.C, "K": self.K,
                "CLUSTER": self.CLUSTER, "VEC": self.VEC}

    def row_tiles(self, m: int) -> int:
        return -(-m // self.ROWS)


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


@functools.lru_cache(maxsize=4096)
def split(n: int, itemsize: int, values: int, cta_threads: int, what: str,
          max_threads: int = MAX_THREADS, min_threads: int = 8, m: int | None = None,
          target_ctas: int = 0) -> RowSplit:
    """The RowSplit for rows of n columns (module docstring); with m given, ROWS is lowered
    while the grid would have fewer than target_ctas CTAs. ValueError names `what` and the
    longest row it can hold."""
    c_max = CHUNK_BYTES // itemsize
    k_max = max(1, values // c_max)
    cta_max = max_threads * c_max * k_max
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CLUSTER * cta_max:
        raise ValueError(f"{what}: the row length n = {n!r} must be an int in "
                         f"1..{MAX_CLUSTER * cta_max}")
    cluster = -(-n // cta_max)
    cols = -(-n // cluster)                         # of the row, per CTA
    p = min(max_threads, max(min_threads, _pow2_at_least(-(-cols // (c_max * k_max)))))
    c = min(c_max, _pow2_at_least(-(-cols // p)))
    k = -(-cols // (p * c))
    rows = 1 if cluster > 1 else max(1, cta_threads // p, WARP // p)
    if m is not None:
        while rows > 1 and rows * p > WARP and -(-m // rows) < target_ctas:
            rows //= 2
    return RowSplit(P=p, ROWS=rows, C=c, K=k, CLUSTER=cluster, VEC=math.gcd(n, c))


PERSISTENT_VALUES = 16           # a backward thread's values: x, dy and temporaries in
PERSISTENT_THREADS = 1024        # <= 64 registers at 1024 threads (one CTA per SM)
PERSISTENT_MIN_THREADS = 32      # <= 32 rows a CTA: its epilogue adds ROWS partials a column


def persistent_split(n: int, itemsize: int, what: str) -> RowSplit:
    """The split of a persistent backward kernel (recipes/rmsnorm.py, layernorm_backward.py):
    16 values a thread, CTAs of 1024 threads, 16384 columns a CTA; CTAs of at most 512
    threads (a register cap of 128) when n forbids 16-byte accesses (each narrower access has
    its own address and predicate registers)."""
    s = split(n, itemsize, PERSISTENT_VALUES, PERSISTENT_THREADS, what, PERSISTENT_THREADS,
              min_threads=PERSISTENT_MIN_THREADS)
    if s.VEC < s.C and s.CLUSTER == 1:
        s = split(n, itemsize, PERSISTENT_VALUES, PERSISTENT_THREADS // 2, what,
                  PERSISTENT_THREADS, min_threads=PERSISTENT_MIN_THREADS)
    return s


def row_layout(P: int, ROWS: int, C: int, K: int) -> lk.TVLayout:
    """Thread p of row j of the tile owns columns [C*p, C*p + C) + k*C*P; tile index = row +
    ROWS * column (recipes/_row_split.row_layout, named by the threads of a row)."""
    return _row_split.row_layout(P * ROWS // WARP, ROWS, C, K)


def row_scalar_layout(P: int, ROWS: int) -> lk.TVLayout:
    """One value per row of the tile, held by each of the row's P threads: the layout
    lk.reduce_sum(v, 1) gives for v over row_layout (a mode of extent 1 has stride 0 there),
    so lk.store takes the sums and lk.broadcast spreads it back."""
    return lk.TVLayout((ROWS, 1), lk.Layout(((P, ROWS), 1), ((0, 1 if ROWS > 1 else 0), 0)))


def column_slice(CLUSTER: int):
    """The column tile of this CTA: its rank in its cluster, 0 without one. The grid is 1-D,
    CLUSTER consecutive CTAs per row tile (clusters (CLUSTER, 1, 1); x reaches 2**31 - 1)."""
    return lk.block_id(0) % CLUSTER if CLUSTER > 1 else 0


def row_block(CLUSTER: int):
    """This CTA's row tile (its cluster's index), or for a persistent kernel its first one."""
    return lk.block_id(0) // CLUSTER if CLUSTER > 1 else lk.block_id(0)


def column_tile(CLUSTER: int, sub: int = 0, SUBS: int = 1):
    """The index of this CTA's column tile (of tv.tile[1] columns), or of its sub-tile `sub`
    when the CTA walks its columns in SUBS sub-tiles one after another."""
    return column_slice(CLUSTER) * SUBS + sub if CLUSTER > 1 or sub else 0


def rows_view(ptr, m, n, tv: lk.TVLayout, row_tile, CLUSTER: int, sub: int = 0,
              SUBS: int = 1):
    """This thread's values of the tile (row_tile, column_tile(...)) of a row-major (m, n)."""
    matrix = lk.global_tensor(ptr, lk.Layout((m, n), (n, 1)))
    return matrix.tile(tv.tile, (row_tile, column_tile(CLUSTER, sub, SUBS))).partition(tv)


def columns_view(ptr, m, n, tv: lk.TVLayout, row_tile, CLUSTER: int, sub: int = 0,
                 SUBS: int = 1):
    """A vector of n (a weight) as seen by every row of the tile."""
    matrix = lk.global_tensor(ptr, lk.Layout((m, n), (0, 1)))
    return matrix.tile(tv.tile, (row_tile, column_tile(CLUSTER, sub, SUBS))).partition(tv)


def scalars_view(ptr, m, P: int, ROWS: int, row_tile):
    """A vector of m (one f32 per row: rstd, mean) in row_scalar_layout."""
    vector = lk.global_tensor(ptr, lk.Layout((m, 1), (1, 0)))
    return vector.tile((ROWS, 1), (row_tile, 0)).partition(row_scalar_layout(P, ROWS))


def first_of_row(P: int, CLUSTER: int):
    """The condition for the one thread that writes a row's scalar: its first thread, in the
    cluster's CTA of rank 0."""
    first = lk.eq(lk.thread_id() % P, 0)
    return first & lk.eq(column_slice(CLUSTER), 0) if CLUSTER > 1 else first


def scratch_floats(m: int, CLUSTER: int, slots: int = 1) -> int:
    """f32 elements of row_sums' scratch for m rows and `slots` statistics a row (1, unused,
    without a cluster: the kernels take the pointer either way)."""
    return m * slots * CLUSTER if CLUSTER > 1 else 1


def row_sums(values: list, scratch, m, row_tile, CLUSTER: int, first: int = 0,
             slots: int | None = None) -> list:
    """Each tensor of `values` (f32, over row_layout) summed along its rows, as tensors in
    row_scalar_layout. Across a cluster through `scratch` (f32, m * slots * CLUSTER; see the
    module docstring): statistic s of this call takes slot first + s of `slots` (default
    len(values)), so several calls of one kernel never share a slot. Every thread of the CTA
    takes part."""
    local = [lk.reduce_sum(v, 1) for v in values]
    if CLUSTER == 1:
        return local
    slots = len(values) if slots is None else slots
    table = lk.global_tensor(scratch, lk.Layout((m, slots * CLUSTER), (slots * CLUSTER, 1)))
    rank = column_slice(CLUSTER)

    def slot(s, r):
        return table.tile((1, 1), (row_tile, (first + s) * CLUSTER + r))
    with lk.if_(lk.eq(lk.thread_id(), 0)):          # ROWS == 1 in a cluster: one row per CTA
        for s, part in enumerate(local):
            lk.store(slot(s, rank).partition(part.layout), part)
    lk.sm90.cluster_sync()
    totals = []
    for s, part in enumerate(local):
        parts = [lk.load(slot(s, r).partition(part.layout)) for r in range(CLUSTER)]
        total = parts[0]
        for p in parts[1:]:                         # rank order: the same sum in every CTA
            total = total + p
        totals.append(total)
    return totals


class Accumulator:
    """A per-thread f32 accumulator over row_layout(P, ROWS, C, K), kept in shared memory
    (registers are the scarce resource of a backward pass): thread t = p + P*r's value
    v = c + C*k (c = a + G*b, G = min(4, C)) lives at (v // G) * G*T + G*t + a of a buffer of T * V
    floats (T threads, V = C*K values a thread), so a thread reads and writes its own 16-byte
    vectors and a warp's vector access is 512 contiguous bytes (no bank conflicts). The buffer
    is laid out as the (ROWS, columns) tile, so the rows can be summed in place at the end."""

    def __init__(self, P: int, ROWS: int, C: int, K: int, name: str):
        g, threads = min(4, C), P * ROWS
        self.tv, self.P, self.ROWS = row_layout(P, ROWS, C, K), P, ROWS
        self.buffer = lk.shared_tensor(lk.Layout((ROWS, (g, C // g, P, K)),
                                                 (g * P, (1, g * threads, g, C * threads))),
                                       lk.f32, name=name)
        self.put(lk.full(self.tv, 0.0))

    def get(self) -> lk.RegisterTensor:
        """This thread's sums, over row_layout."""
        return lk.load(self.buffer.partition(self.tv))

    def put(self, value: lk.RegisterTensor) -> None:
        lk.store(self.buffer.partition(self.tv), value)

    def store_rows_summed(self, ptr, rows, n, CLUSTER: int, row_offset=0, sub: int = 0,
                          SUBS: int = 1) -> None:
        """Write the sums over the tile's rows as row row_offset + row_block() of the (rows, n)
        f32 partials (column_sum adds them up), at column_tile(CLUSTER, sub, SUBS): thread
        u < users = gcd(columns, threads) adds the ROWS rows of columns u, u + users, ...
        (coalesced stores)."""
        P, ROWS = self.P, self.ROWS
        cols, threads = self.tv.tile[1], P * ROWS
        if ROWS == 1:
            total, layout, users = self.get(), self.tv, threads
        else:
            lk.barrier()                            # every thread's last sums are in the buffer
            users = math.gcd(cols, threads)          # a power of two: threads split evenly
            e = cols // users
            gather = lk.TVLayout((ROWS, cols), lk.Layout(
                ((users, threads // users), (ROWS, e)), ((ROWS, 0), (1, ROWS * users))))
            total = lk.reduce_sum(lk.load(self.buffer.partition(gather)), 0)
            layout = total.layout
        view = lk.global_tensor(ptr, lk.Layout((rows, n), (n, 1))).tile(
            layout.tile, (row_offset + row_block(CLUSTER), column_tile(CLUSTER, sub, SUBS))
        ).partition(layout)
        if users < threads:
            with lk.if_(lk.thread_id() < users):
                lk.store(view, total)
        else:
            lk.store(view, total)


# --- the column sum of partials: out[b, j] = sum_i partial[b, i, j], in a fixed order -------

SUM_WARPS = 32                   # warp w adds partial rows w, w + SUM_WARPS, ...
SUM_COLS = WARP * 4              # 4 f32 columns (16 bytes) per lane


def _column_sum_body(partial: lk.Pointer[lk.f32], out: lk.Pointer[lk.bf16], batches: lk.i32,
                     rows: lk.i32, n: lk.i32, WARPS: lk.constexpr, STEPS: lk.constexpr):
    # tile (1, WARPS, SUM_COLS) of the (batches, rows, n) partials: lane l of warp w holds row
    # w, columns 4l .. 4l + 3; tile index = row + WARPS * column
    tv = lk.TVLayout((1, WARPS, SUM_COLS),
                     lk.Layout(((WARP, WARPS), 4), ((WARPS * 4, 1), WARPS)))
    batch, column_tile = lk.block_id(1), lk.block_id(0)
    parts = lk.global_tensor(partial, lk.Layout((batches, rows, n), (rows * n, n, 1)))
    acc = lk.load(parts.tile(tv.tile, (batch, 0, column_tile)).partition(tv))
    for step in range(1, STEPS):                    # independent loads, one add chain each
        acc = acc + lk.load(parts.tile(tv.tile, (batch, step, column_tile)).partition(tv))
    total = lk.reduce_sum(acc, 1)
    sums = lk.global_tensor(out, lk.Layout((batches, 1, n), (n, 0, 1)))
    with lk.if_(lk.thread_id() < WARP):             # every warp holds the sums: warp 0 stores
        lk.store(sums.tile(total.layout.tile, (batch, 0, column_tile)).partition(total.layout),
                 lk.cast(total, out.dtype))


def column_sum_launch(out_dtype, batches: int, rows: int, n: int, warps: int = SUM_WARPS):
    """(kernel, grid, constexprs) of the column sum of (batches, rows, n) f32 partials into a
    (batches, n) tensor of out_dtype, with CTAs of `warps` warps (fewer on the interpreter)."""
    kernel = make_kernel(_column_sum_body, f"column_sum_{_name(out_dtype)}_w{warps}", warps, 1,
                         (("out", out_dtype),))
    return kernel, (-(-n // SUM_COLS), batches), {"WARPS": warps, "STEPS": -(-rows // warps)}


# --- kernels per dtype, block size and cluster ---------------------------------------------

def _name(dtype) -> str:
    return str(dtype).removeprefix("lk.")


@functools.lru_cache(maxsize=None)
def make_kernel(body, name: str, num_warps: int, cluster: int, dtypes: tuple) -> lk.Kernel:
    """`body` as an lk.Kernel named `name` of num_warps warps, in clusters of `cluster` CTAs
    along x (none for 1), with the Pointer parameters named in `dtypes` ((param, lk dtype)
    pairs) retyped (the body is written once for every dtype)."""
    fn = type(body)(body.__code__, body.__globals__, name, body.__defaults__, body.__closure__)
    fn.__annotations__ = dict(body.__annotations__)
    for param, dtype in dtypes:
        fn.__annotations__[param] = lk.Pointer[dtype]
    return lk.kernel(fn, num_warps=num_warps, cluster=(cluster, 1, 1) if cluster > 1 else None)
