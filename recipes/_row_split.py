"""The work split of the forward row kernels (recipes/softmax.py, recipes/layernorm.py): which CTAs,
threads and registers hold which columns of a row-major (m, n) bf16 matrix, and the heuristic
that picks it per shape (`choose_config(m, n, dtype)`).

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

A cluster's CTAs reduce their own columns, then swap the per-row partials through a global f32
scratch (`RowTiles.exchange`): one thread per row stores them, `lk.sm90.cluster_sync()`, every
thread loads its row's partials of all CTAs. The DSL has no distributed-shared-memory access
yet; the cluster barrier's release/acquire orders global memory (ptxas emits MEMBAR.ALL.GPU
before the arrive and CCTL.IVALL, an L1 invalidate, after the wait), at the price of an L2
round trip per exchange.

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
  * Rows per CTA fill 128 threads unless the grid would then have fewer than TARGET_CTAS
    CTAs (small m): fewer rows per CTA spread a small matrix over more SMs.
"""
from __future__ import annotations

import functools
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
                  cta_threads: int = CTA_THREADS) -> Config:
    """The split for an (m, n) row-major matrix of `dtype` (bf16): see the module docstring.
    The keywords are the heuristic's budgets (defaults: the module's constants), for sweeps
    (benchmarks/bench_rows.py --sweep)."""
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


def row_layout(num_warps: int, ROWS: int, C: int, K: int) -> lk.TVLayout:
    """Thread p of a row owns columns [C*p, C*p + C) + k*C*P (P threads per row); the rows
    of the tile go to consecutive groups of P threads. Tile index = row + ROWS * column."""
    P = 32 * num_warps // ROWS
    return lk.TVLayout((ROWS, P * C * K),
                       lk.Layout(((P, ROWS), (C, K)), ((ROWS * C, 1), (ROWS, ROWS * C * P))))


def partials_layout(num_warps: int, ROWS: int, cluster: int) -> lk.TVLayout:
    """Every thread of row j holds that row's `cluster` partials (tile index j + ROWS * r)."""
    P = 32 * num_warps // ROWS
    return lk.TVLayout((ROWS, cluster), lk.Layout(((P, ROWS), cluster), ((0, 1), ROWS)))


class RowTiles:
    """Inside a row kernel: this CTA's part of (m, n) row-major matrices and (n,) vectors under
    row_layout(WARPS, ROWS, C, K), and the cluster's exchange of per-row partials."""

    def __init__(self, m, n, WARPS: int, ROWS: int, C: int, K: int, cluster: int = 1):
        self.m, self.n, self.cluster = m, n, cluster
        self.warps, self.rows = WARPS, ROWS
        self.tv = row_layout(WARPS, ROWS, C, K)
        self.columns = self.tv.tile[1]
        block = lk.block_id(0)
        self.row_block = block // cluster if cluster > 1 else block
        self.part = block % cluster if cluster > 1 else 0
        self.coord = (self.row_block, self.part)

    def rows_of(self, ptr):
        """This thread's values of the (m, n) row-major matrix at ptr."""
        matrix = lk.global_tensor(ptr, lk.Layout((self.m, self.n), (self.n, 1)))
        return matrix.tile(self.tv.tile, self.coord).partition(self.tv)

    def vector_of(self, ptr):
        """This thread's values of the (n,) vector at ptr, repeated for every row."""
        matrix = lk.global_tensor(ptr, lk.Layout((self.m, self.n), (0, 1)))
        return matrix.tile(self.tv.tile, self.coord).partition(self.tv)

    def part_columns(self):
        """The columns of the row this CTA holds inside n (an i32 kernel value; n alone
        without a cluster)."""
        if self.cluster == 1:
            return self.n
        return lk.minimum(self.n - self.part * self.columns, self.columns)

    def exchange(self, partials, quantities: list) -> list:
        """Swap per-row partials (row-reduced f32 tensors, one per quantity) between the
        cluster's CTAs through the (m, len(quantities) * cluster) f32 scratch at `partials`;
        returns, per quantity, a tensor over partials_layout: every CTA's value of its row."""
        count = len(quantities)
        scratch = lk.global_tensor(partials, lk.Layout((self.m, count * self.cluster),
                                                       (count * self.cluster, 1)))
        threads_per_row = 32 * self.warps // self.rows
        with lk.if_(lk.eq(lk.thread_id() % threads_per_row, 0)):   # one store per row
            for q, value in enumerate(quantities):
                column = q * self.cluster + self.part
                lk.store(scratch.tile((self.rows, 1), (self.row_block, column))
                         .partition(value.layout), value)
        lk.sm90.cluster_sync()          # release: the stores above; acquire: the peers'
        peers = partials_layout(self.warps, self.rows, self.cluster)
        return [lk.load(scratch.tile((self.rows, self.cluster), (self.row_block, q))
                        .partition(peers)) for q in range(count)]


def scratch_floats(config: Config, m: int, quantities: int) -> int:
    """f32 elements of the exchange scratch a launch of `config` over m rows needs (0 when
    rows are not split)."""
    return 0 if config.cluster == 1 else m * quantities * config.cluster


def kernel_name(recipe: str, config: Config) -> str:
    """`softmax_w4`, `softmax_w8_c2`: one lk.Kernel per block size and cluster."""
    return f"{recipe}_w{config.warps}" + (f"_c{config.cluster}" if config.cluster > 1 else "")


def make_kernel(body, recipe: str, config: Config) -> lk.Kernel:
    """`body` as an lk.Kernel of config's block size and cluster, named kernel_name(...)."""
    fn = type(body)(body.__code__, body.__globals__, kernel_name(recipe, config))
    fn.__annotations__ = body.__annotations__
    cluster = (config.cluster, 1, 1) if config.cluster > 1 else None
    return lk.kernel(fn, num_warps=config.warps, cluster=cluster)


SHAPE_GRID = [(m, n) for m in (1, 7, 1000, 4096, 32768)
              for n in (1000, 3000, 4096, 8192, 16384, 32768, 65536, 131072)]


def distinct_configs(shapes=SHAPE_GRID) -> dict:
    """{Config: the first (m, n) of `shapes` that picks it}: what the heuristic can launch on
    issue 19's shape grid."""
    found: dict = {}
    for m, n in shapes:
        found.setdefault(choose_config(m, n), (m, n))
    return found


__all__ = ["Config", "choose_config", "row_layout", "partials_layout", "RowTiles",
           "vector_width", "scratch_floats", "make_kernel", "kernel_name", "distinct_configs",
           "MAX_COLUMNS", "SHAPE_GRID"]
