"""The device side every row-kernel recipe shares (softmax.py, layernorm.py, rmsnorm.py,
softmax_backward.py, layernorm_backward.py): the TV layout of a row over lanes, warps and a
cluster's CTAs, its views, the cluster exchange of per-row partials and the row sums (across a
cluster through distributed shared memory), the shared-memory accumulator of a persistent
backward pass, the deterministic column-sum kernel of per-CTA partials (a weight's gradient),
and one lk.Kernel per dtype, block size and cluster. The host side of the backward recipes
and rmsnorm (argument checks, the persistent grid, CPU-interpreter runs, benchmark tables) is
recipes/_rowwise.py.

The work splits themselves (the forward softmax / layernorm's measured Config, and the
RowSplit of every dtype and of the persistent backward kernels) are recipes/_row_split.py's;
softmax.py and layernorm.py hold their rows with `RowTiles` (the same views, under the same
row_layout), whose cluster `exchange` gives every CTA its peers' partials (for a max and
Chan's merge of variances) where `row_sums` adds them; both are `cluster_exchange`.

Row sums (`row_sums`): lk.reduce_sum over the CTA's part of each row (in-thread tree, shuffles,
shared memory across warps); with CLUSTER > 1 `cluster_exchange`: lk.sm90.cluster_sync() (the
peers have started and read the slots' previous contents), the first thread of each row stores
its part into slot [row, q * CLUSTER + rank] of every CTA's shared buffer (lk.sm90.dsmem_store:
st.shared::cluster), lk.sm90.cluster_sync() (release/acquire at cluster scope), and every
thread adds the CLUSTER parts from its own shared memory in rank order, so every CTA of the
cluster holds the same, deterministic sum. The interpreter and the static protocol check both
check that the barriers order every peer access (layoutkit.dsl.sm90.dsmem).

The kernels with one exchange (softmax, layernorm, rmsnorm forward, softmax_backward) make it
cheaper: an mbarrier initialised before the loads (`exchange_barrier`), a relaxed cluster
barrier right after the loads are issued (`peers_started`: no MEMBAR, the loads in flight), then
asynchronous stores into the other CTAs (lk.sm90.dsmem_store_async: st.async completing on each
receiver's mbarrier, which its thread 0 arms with the bytes it expects), a plain store and the
row's arrive for its own, and a wait on the local barrier:
no cluster barrier after the stores (a receiver cannot exit before its bytes land).
ASYNC_EXCHANGE = False switches them back to the st.shared::cluster form.

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

import layoutkit as lk
from recipes._row_split import WARP

def row_layout(P: int, ROWS: int, C: int, K: int) -> lk.TVLayout:
    """Thread p of a row owns columns [C*p, C*p + C) + k*C*P (P threads per row); the rows
    of the tile go to consecutive groups of P threads. Tile index = row + ROWS * column."""
    return lk.TVLayout((ROWS, P * C * K),
                       lk.Layout(((P, ROWS), (C, K)), ((ROWS * C, 1), (ROWS, ROWS * C * P))))


def partials_layout(P: int, ROWS: int, cluster: int) -> lk.TVLayout:
    """Every thread of row j holds that row's `cluster` partials (tile index j + ROWS * r)."""
    return lk.TVLayout((ROWS, cluster), lk.Layout(((P, ROWS), cluster), ((0, 1), ROWS)))


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


ASYNC_EXCHANGE = True     # single-exchange kernels: st.async + mbarrier; False: st.shared::cluster
                          # and a cluster barrier (the form ptx-snippets/14 ran on the H200)
PEERS_STARTED_LATE = False  # single-exchange kernels: their relaxed cluster barrier right before
                            # the exchange instead of right after the loads (an A/B of where the
                            # wait costs less: benchmarks/bench_rows.py --peers late)


def exchange_barrier(CLUSTER: int, ROWS: int, name: str):
    """In a cluster kernel, the mbarrier an asynchronous exchange of ROWS rows a CTA completes
    on (one stage; ROWS arrivals: each row's first thread, after storing its own CTA's
    partials), initialised by thread 0 and fenced for the cluster; None without a cluster (or
    with ASYNC_EXCHANGE off). Call it before the loads, and peers_started() between it and
    the exchange."""
    if CLUSTER == 1 or not ASYNC_EXCHANGE:
        return None
    full = lk.sm90.mbarrier_array(1, ROWS, name=name)
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.mbarrier_init(full)
        lk.sm90.fence_mbarrier_init()
    return full[0]


def cluster_exchange(parts: list, P: int, ROWS: int, CLUSTER: int, name: str,
                     start: bool = True, barrier=None, parity=None) -> list:
    """Every CTA's per-row partials (`parts`: row-reduced f32 tensors, one per quantity, in
    row_scalar_layout(P, ROWS)) through distributed shared memory: the first thread of each
    row stores its CTA's value of the row into slot [row, q * CLUSTER + rank] of the shared
    buffer `name` of every CTA of the cluster (lk.sm90.dsmem_store), lk.sm90.cluster_sync(),
    and every thread reads its row's CLUSTER values from its own buffer. Returns, per
    quantity, a tensor over partials_layout(P, ROWS, CLUSTER) (rank order). `start` puts a
    cluster barrier first: the peers have started, and have read what an earlier exchange
    left in these slots (only a kernel whose previous exchange used other slots, with a
    cluster barrier since, may leave it out). With `barrier` (exchange_barrier's, the peers
    started since its init, the kernel's only exchange) the stores into the peers are
    asynchronous (lk.sm90.dsmem_store_async completing on each receiver's barrier), the own
    CTA's a plain store followed by the row's arrive on it (thread 0's arrive also expects
    the peers' bytes), and every thread waits on it: no cluster barrier after them.
    `parity` (a persistent loop's round % 2) doubles the buffer and takes copy `parity`: a
    round writes the copy its peers last read two rounds ago, before the previous round's
    cluster barrier, so the exchange needs no first barrier (start=False; the loop passes
    peers_started() before its first round). Every thread of the CTA takes part."""
    count = len(parts)
    copies = 1 if parity is None else 2
    table = lk.shared_tensor(lk.Layout((ROWS, count * CLUSTER, copies),
                                       (1, ROWS, ROWS * count * CLUSTER)), lk.f32, name=name)
    table = table[:, :, 0 if parity is None else parity]
    rank = column_slice(CLUSTER)
    if start:
        lk.sm90.cluster_sync()
    elif barrier is not None and PEERS_STARTED_LATE:
        peers_started(CLUSTER)                          # deferred by loads_issued()
    leader = lk.eq(lk.thread_id() % P, 0)
    with lk.if_(leader):                                # one store per row and CTA
        for q, part in enumerate(parts):
            slot = table.tile((ROWS, 1), (0, q * CLUSTER + rank)).partition(part.layout)
            if barrier is None:
                for peer in range(CLUSTER):
                    lk.sm90.dsmem_store(slot, part, cta=peer)
                continue
            lk.store(slot, part)                        # the own copy; then every peer's
            for step in range(1, CLUSTER):
                lk.sm90.dsmem_store_async(slot, part, cta=(rank + step) % CLUSTER,
                                          barrier=barrier)
    if barrier is None:
        lk.sm90.cluster_sync()  # release: the peers' stores into this buffer; acquire: them
    else:
        with lk.if_(lk.eq(lk.thread_id(), 0)):          # row 0: arrive, expecting the peers'
            lk.sm90.mbarrier_expect_tx(barrier, count * (CLUSTER - 1) * ROWS * lk.f32.nbytes)
        with lk.if_(leader & (lk.thread_id() > 0)):     # the other rows' leaders: arrive
            lk.sm90.mbarrier_arrive(barrier)
        lk.sm90.mbarrier_wait(barrier, 0)               # own stores and the peers' landed
    peers = partials_layout(P, ROWS, CLUSTER)
    return [lk.load(table.tile((ROWS, CLUSTER), (0, q)).partition(peers)) for q in range(count)]


def staged_rows(rows, tv: lk.TVLayout, name: str):
    """This thread's values of the global partition `rows` (over tv) copied into the same
    partition of a new shared tile of tv.tile, row-major (lk.sm80.cp_async, 16 bytes a copy
    where rows allows; zeros past the bounds), in the caller's open commit group; returns the
    shared partition (read it after lk.sm80.cp_async_wait and lk.barrier()). Shared memory
    instead of registers holds the row between its loads and its last use: more CTAs
    resident per SM, more bytes in flight."""
    rows_tile, columns = tv.tile
    tile = lk.shared_tensor(lk.Layout((rows_tile, columns), (columns, 1)), rows.dtype,
                            name=name, align=16)
    part = tile.partition(tv)
    lk.sm80.cp_async(part, rows)
    return part


def peers_started(CLUSTER: int) -> None:
    """In a cluster kernel, a relaxed cluster barrier (lk.sm90.cluster_sync(relaxed=True)):
    every peer has started, so a first exchange may leave out its own first barrier
    (start=False). Placed right after a kernel's loads are issued, it orders no memory and
    waits while they are in flight."""
    if CLUSTER > 1:
        lk.sm90.cluster_sync(relaxed=True)


def loads_issued(CLUSTER: int) -> None:
    """In a single-exchange cluster kernel (one asynchronous exchange on exchange_barrier's
    mbarrier), right after its loads are issued: `peers_started`, or nothing where
    PEERS_STARTED_LATE defers it to the asynchronous exchange (cluster_exchange with a
    barrier; ASYNC_EXCHANGE)."""
    if not (PEERS_STARTED_LATE and ASYNC_EXCHANGE):
        peers_started(CLUSTER)


def row_sums(values: list, row_tile, P: int, ROWS: int, CLUSTER: int, first: int = 0,
             start: bool = True, barrier=None, parity=None) -> list:
    """Each tensor of `values` (f32, over row_layout(P, ROWS, ...)) summed along its rows, as
    tensors in row_scalar_layout. Across a cluster through distributed shared memory
    (`cluster_exchange` into the buffer `row_sums{first}`: several calls of one kernel give
    different `first`; `start`, `barrier` and `parity` as there), the CLUSTER parts added in
    rank order, so every CTA of the cluster holds the same, deterministic sum. Every thread of
    the CTA takes part."""
    local = [lk.reduce_sum(v, 1) for v in values]
    if CLUSTER == 1:
        return local
    exchanged = cluster_exchange(local, P, ROWS, CLUSTER, f"row_sums{first}", start, barrier,
                                 parity)
    totals = []
    for part, parts in zip(local, exchanged):       # value r of parts: rank r's
        terms = [lk.RegisterTensor(lk.f32, part.layout, [v]) for v in parts.values]
        total = terms[0]
        for term in terms[1:]:                      # rank order: the same sum in every CTA
            total = total + term
        totals.append(total)
    return totals


class RowTiles:
    """Inside a row kernel: this CTA's part of (m, n) row-major matrices and (n,) vectors under
    row_layout(WARPS, ROWS, C, K), and the cluster's exchange of per-row partials."""

    def __init__(self, m, n, WARPS: int, ROWS: int, C: int, K: int, cluster: int = 1):
        self.m, self.n, self.cluster = m, n, cluster
        self.warps, self.rows = WARPS, ROWS
        self.tv = row_layout(WARP * WARPS // ROWS, ROWS, C, K)
        self.columns = self.tv.tile[1]
        block = lk.block_id(0)
        self.row_block = block // cluster if cluster > 1 else block
        self.part = block % cluster if cluster > 1 else 0
        self.coord = (self.row_block, self.part)
        self.started = False
        self.barrier = exchange_barrier(cluster, ROWS, "row_exchange_full")

    def peers_started(self) -> None:
        """`peers_started` (a relaxed cluster barrier), right after the row's loads: the
        exchange then leaves out its own first barrier and is asynchronous (on the barrier
        initialised when the tiles were made)."""
        loads_issued(self.cluster)
        self.started = self.cluster > 1

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

    def exchange(self, quantities: list) -> list:
        """Swap per-row partials (row-reduced f32 tensors, one per quantity) between the
        cluster's CTAs (`cluster_exchange`); returns, per quantity, a tensor over
        partials_layout: every CTA's value of its row."""
        return cluster_exchange(quantities, WARP * self.warps // self.rows, self.rows,
                                self.cluster, "row_exchange", start=not self.started,
                                barrier=self.barrier if self.started else None)


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
def make_kernel(body, name: str, num_warps: int, cluster: int, dtypes: tuple,
                max_registers: int | None = None) -> lk.Kernel:
    """`body` as an lk.Kernel named `name` of num_warps warps, in clusters of `cluster` CTAs
    along x (none for 1), with the Pointer parameters named in `dtypes` ((param, lk dtype)
    pairs) retyped (the body is written once for every dtype); `max_registers` caps a
    thread's registers (lk.kernel's .maxnreg: more CTAs resident per SM)."""
    fn = type(body)(body.__code__, body.__globals__, name, body.__defaults__, body.__closure__)
    fn.__annotations__ = dict(body.__annotations__)
    for param, dtype in dtypes:
        fn.__annotations__[param] = lk.Pointer[dtype]
    return lk.kernel(fn, num_warps=num_warps, cluster=(cluster, 1, 1) if cluster > 1 else None,
                     max_registers=max_registers)
