"""The work splits of the row kernels. `Config` is the forward softmax / layernorm's
(recipes/softmax.py, recipes/layernorm.py): which CTAs, threads and registers hold which
columns of a row-major (m, n) bf16 matrix, and the heuristic that picks it per shape
(`choose_config(m, n, dtype)`); `RowSplit` (below) is rmsnorm's and the backward kernels'.

A `Config` is every choice, as fields:

    threads   threads per CTA (whole warps)
    rows      rows per CTA; threads_per_row = threads // rows (a power of two: the lanes and
              warps of a row reduce by XOR shuffles, then through shared memory)
    vector    C, consecutive columns per access: 8 (one 16-byte access of bf16) when n % 8 == 0,
              else the largest of 4, 2, 1 dividing n (rows stay aligned to C elements)
    chunks    K, accesses per thread per row: each thread keeps V = C * K values of its row in
              registers, chunks C * threads_per_row columns apart
    cluster   CTAs per row (a thread-block cluster along x, 1..8); CTA r of a cluster holds
              columns [r * W, (r + 1) * W) of the row, W = threads_per_row * C * K

    CTA (row_block, r), thread p of row j:  columns r*W + C*p + k*C*P + [0, C), k < K

A cluster's CTAs reduce their own columns, then swap the per-row partials through distributed
shared memory (recipes/_rowwise_kernel.py's `cluster_exchange`): a relaxed cluster barrier
after the loads (the peers have started), one thread per row stores its CTA's partials into
every other CTA's shared buffer (`lk.sm90.dsmem_store_async`, st.async completing on the
peer's mbarrier) and its own, every thread waits on its own mbarrier and reads its row's
partials of all CTAs from its own shared memory. (Until 2026-12-01 the exchange went through a
global f32 scratch: an L2 round trip per exchange.)

The heuristic, reasoned from the H200 (4.8 TB/s HBM3e, 132 SMs, 64K registers, 50 MB L2) and
the measured split of issue 19 (docs/PERFORMANCE.md):
  * The whole row lives in registers between its load and its store (one read, one write: the
    bytes the bandwidth counts). A CTA has loads in flight only until its first reduction, so
    an SM reaches the bandwidth through several CTAs at different phases: CTAs are small (128
    threads; 256 when a row needs them), never the 512-1024-thread CTAs that held 16k and 32k
    rows (0.93 and 0.74 of the copy bandwidth: one or two CTAs per SM, idle during their
    16- and 32-warp reductions).
  * V <= MAX_VALUES = 64 values per thread: 83-128 registers (softmax, layernorm; ptxas at
    128-256 threads may use up to 255, so no spills), 64-96 KB of bf16 resident per SM.
    Fewer threads per row means fewer partials per reduction: threads_per_row is the smallest
    power of two >= MIN_THREADS_PER_ROW that holds the CTA's columns in V <= 64.
  * A CTA holds at most MAX_CTA_COLUMNS = 256 threads * 64 = 16384 columns; longer rows are
    split over cluster = ceil(n / 16384) CTAs (2 at 32k, 4 at 64k, 8 at 128k = MAX_COLUMNS).
  * When n forbids 16-byte accesses (n % 8 != 0), each narrower access has its own address
    and predicate registers: half the values a thread (32) over up to twice the threads a row
    (512), the same columns a CTA (layernorm at n = 32767: 229 -> 108 registers).
  * Rows per CTA fill 128 threads unless the grid would then have fewer than TARGET_CTAS
    CTAs (small m): fewer rows per CTA spread a small matrix over more SMs.

`RowSplit` (`split`), the split of rmsnorm and the backward kernels, for rows of n columns of a
dtype of `itemsize` bytes, at most `values` f32 values a thread (the registers after the cast)
and `max_threads` threads a row:

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
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import layoutkit as lk

SMS = 132                     # streaming multiprocessors of an H100 / H200 SXM
TARGET_CTAS = 2 * SMS         # below this many CTAs, fewer rows per CTA
CTA_THREADS = 128             # the CTA size when a row needs no more threads
MAX_THREADS_PER_ROW = 256
MIN_THREADS_PER_ROW = 8
MAX_VALUES = 64               # row values per thread (registers: see the module docstring)
ACCESS_BYTES = 16             # the widest global access
MAX_CLUSTER = 8               # the portable cluster size of sm_90
WARP = 32
MAX_CTA_COLUMNS = MAX_THREADS_PER_ROW * MAX_VALUES
MAX_COLUMNS = MAX_CLUSTER * MAX_CTA_COLUMNS


@dataclass(frozen=True)
class Config:
    """One work split of a row kernel (fields: see the module docstring)."""

    threads: int
    rows: int
    vector: int
    chunks: int
    cluster: int = 1

    def __post_init__(self):
        for name in ("threads", "rows", "vector", "chunks", "cluster"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Config.{name} = {value!r} must be a positive int")
        per_row, rest = divmod(self.threads, self.rows)
        if self.threads % 32 or rest or per_row & (per_row - 1):
            raise ValueError(f"{self}: threads must be whole warps and threads // rows a power "
                             f"of two (the threads of a row reduce by XOR shuffles)")
        if self.vector not in (1, 2, 4, 8):
            raise ValueError(f"{self}: vector (columns per access) is 1, 2, 4 or 8")
        if self.cluster > MAX_CLUSTER:
            raise ValueError(f"{self}: cluster is at most {MAX_CLUSTER} CTAs (portable sm_90)")

    @property
    def warps(self) -> int:
        return self.threads // 32

    @property
    def threads_per_row(self) -> int:
        return self.threads // self.rows

    @property
    def values(self) -> int:
        """Row values each thread holds in registers (V = C * K)."""
        return self.vector * self.chunks

    @property
    def columns(self) -> int:
        """Columns of a row one CTA holds (W)."""
        return self.threads_per_row * self.values

    def check(self, n: int) -> None:
        """ValueError unless this split covers rows of n columns with no CTA left empty
        (columns past n are masked; each CTA of a cluster holds at least one column)."""
        if n % self.vector or not (self.cluster - 1) * self.columns < n <= \
                self.cluster * self.columns:
            raise ValueError(f"{self}: does not split rows of n = {n} columns (needs "
                             f"n % vector == 0 and (cluster - 1) * {self.columns} < n <= "
                             f"cluster * {self.columns})")

    def grid(self, m: int) -> int:
        """CTAs for m rows: ceil(m / rows) row blocks of `cluster` CTAs, along x."""
        return -(-m // self.rows) * self.cluster

    def constexprs(self) -> dict:
        """The kernel's constexpr arguments (the cluster shape is a kernel option)."""
        return {"WARPS": self.warps, "ROWS": self.rows, "C": self.vector, "K": self.chunks}


def vector_width(n: int, element_bytes: int = 2) -> int:
    """Columns per access: the widest 2**k <= 16 bytes dividing n, so every row starts aligned."""
    width = ACCESS_BYTES // element_bytes
    while n % width:
        width //= 2
    return width


def _next_power_of_two(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


@functools.lru_cache(maxsize=4096)
def choose_config(m: int, n: int, dtype=lk.bf16, *, max_values: int = MAX_VALUES,
                  max_threads_per_row: int = MAX_THREADS_PER_ROW,
                  cta_threads: int = CTA_THREADS, narrow: bool = True) -> Config:
    """The split for an (m, n) row-major matrix of `dtype` (bf16): see the module docstring.
    The keywords are the heuristic's budgets (defaults: the module's constants), for sweeps
    (benchmarks/bench_rows.py --sweep); `narrow`: half the values a thread over twice the
    threads a row when n forbids 16-byte accesses."""
    if dtype != lk.bf16:
        raise ValueError(f"row kernels: dtype {dtype} is not supported (bf16 only)")
    for name, value, low in (("m", m, 1), ("n", n, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"row kernels: {name} = {value!r} must be a positive int")
    cta_max = max_threads_per_row * max_values
    if n > MAX_CLUSTER * cta_max:
        raise ValueError(f"row kernels: the row length n = {n} must be in "
                         f"1..{MAX_CLUSTER * cta_max} ({MAX_CLUSTER} CTAs of {cta_max} columns)")
    vector = vector_width(n, dtype.nbytes)
    if narrow and vector < ACCESS_BYTES // dtype.nbytes:
        max_values, max_threads_per_row = max_values // 2, 2 * max_threads_per_row
    cluster = -(-n // cta_max)
    cta_columns = -(-n // cluster)
    per_row = min(max_threads_per_row,
                  max(MIN_THREADS_PER_ROW, _next_power_of_two(-(-cta_columns // max_values))))
    chunks = -(-cta_columns // (per_row * vector))
    rows = max(1, cta_threads // per_row)
    while rows > 1 and rows * per_row > 32 and -(-m // rows) * cluster < TARGET_CTAS:
        rows //= 2
    config = Config(rows * per_row, rows, vector, chunks, cluster)
    config.check(n)
    return config


def kernel_name(recipe: str, config: Config) -> str:
    """`softmax_w4`, `softmax_w8_c2`: one lk.Kernel per block size and cluster."""
    return f"{recipe}_w{config.warps}" + (f"_c{config.cluster}" if config.cluster > 1 else "")


# --- the split of every dtype and of the persistent backward kernels (RowSplit) -------------

MAX_THREADS = 1024               # per CTA


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


@functools.lru_cache(maxsize=4096)
def split(n: int, itemsize: int, values: int, cta_threads: int, what: str,
          max_threads: int = MAX_THREADS, min_threads: int = 8, m: int | None = None,
          target_ctas: int = 0) -> RowSplit:
    """The RowSplit for rows of n columns (the module docstring); with m given, ROWS is lowered
    while the grid would have fewer than target_ctas CTAs. ValueError names `what` and the
    longest row it can hold."""
    c_max = ACCESS_BYTES // itemsize
    k_max = max(1, values // c_max)
    cta_max = max_threads * c_max * k_max
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CLUSTER * cta_max:
        raise ValueError(f"{what}: the row length n = {n!r} must be an int in "
                         f"1..{MAX_CLUSTER * cta_max}")
    cluster = -(-n // cta_max)
    cols = -(-n // cluster)                         # of the row, per CTA
    p = min(max_threads, max(min_threads, _next_power_of_two(-(-cols // (c_max * k_max)))))
    c = min(c_max, _next_power_of_two(-(-cols // p)))
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


SHAPE_GRID = [(m, n) for m in (1, 7, 1000, 4096, 32768)
              for n in (1000, 3000, 4096, 8192, 16384, 32768, 65536, 131072)]


def distinct_configs(shapes=SHAPE_GRID) -> dict:
    """{Config: the first (m, n) of `shapes` that picks it}: what the heuristic can launch on
    issue 19's shape grid."""
    found: dict = {}
    for m, n in shapes:
        found.setdefault(choose_config(m, n), (m, n))
    return found


__all__ = ["Config", "choose_config", "vector_width", "kernel_name",
           "distinct_configs", "RowSplit", "split", "persistent_split", "MAX_COLUMNS",
           "SHAPE_GRID"]
