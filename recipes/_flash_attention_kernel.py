"""The kernel of recipes/flash_attention.py (FlashAttention-3-class forward attention for
Hopper: O = softmax(Q K^T * scale) V and the log-sum-exp of every row, bf16 in and out, f32
accumulation and softmax): its pipeline, numerics and instruction budget. The host side
(configs per head dim, the entry point, references, checks, benchmark) is the recipe file.

One CTA per (BM-row query tile, head, batch), BM = 64 * CONSUMERS (Config.CONSUMERS: 2, the
default, or 3), causal tiles longest first (query_tile); 1 + CONSUMERS warpgroups (every line
below is in the kernel):

    warpgroup 0, producer (PRODUCER_REGISTERS): one elected thread loads the Q tile once
        (q_full), then per key block j = n_end-1 .. 0 (ring counter i): wait k_empty[s] ->
        expect_tx(k_full[s]) { TMA K_j }; wait v_empty[s] -> expect_tx(v_full[s]) { TMA V_j }
    warpgroups 1 .. CONSUMERS, consumers (CONSUMER_REGISTERS), 64 query rows each:
        prologue   S_0 = Q K_0^T; softmax(S_0) -> m, l, P_0
        per block  [ping-pong: wait my turn]  S_i = Q K_i^T (SS wgmma, issued)
                   O *= alpha_{i-1} (in place, under S_i); O += P_{i-1} V_{i-1} (RS wgmma: P
                   from registers, issued)
                   [ping-pong: the next warpgroup's turn]
                   wait_group 1 (S_i done, P V still running) -> release K stage;
                   online softmax of S_i (mask on boundary blocks): m, l, alpha_i, P_i in f32
                   wait_group 0 -> release V stage; P_i -> bf16 (the A fragment of the next P V)
        epilogue   O *= alpha; O += P V; l summed across the row's quad; O /= l; lse = m*scale
                   + ln l; O -> shared (the warpgroup's rows of the Q tile, free now) ->
                   fence.proxy.async -> TMA store

Numerics (FlashAttention's online softmax, exact up to bf16 rounding of P): the running max m is
in score units and starts at -inf; c = scale * log2(e) is folded into one fma per score, P =
exp2(S*c - m*c), alpha = exp2(m_old*c - m_new*c) (one fma reusing P's -m*c); a row whose max is
still -inf (all masked) uses 0 in the exponent (so -inf - -inf never makes a NaN; only masked
blocks need that guard: an unmasked block's max is finite). l is kept per thread (each thread's
part of its rows, lk.thread_sum) and summed across the quad once. Final O = O / l and lse = (m*c
+ log2 l) * ln 2 (natural log, FlashAttention's units); l = 0 gives O = 0, lse = -inf.

Pipeline switches (constexprs, `Config`): BN keys per block, STAGES ring depth, OVERLAP (intra-
warpgroup: S_i issued before the softmax of S_{i-1} finishes its P V; off = FlashAttention-2's
order inside a warpgroup), PINGPONG (the consumer warpgroups take turns issuing wgmmas in a
ring of named barriers, wg waiting at pingpong_barrier(wg) and passing to wg + 1, so one's
softmax runs under the others' matrix work), register budgets (within REGISTER_FILE: 24 + 2 *
240 or 32 + 3 * 160 per 128 threads), CONSUMERS (192-row tiles amortize each K/V tile over
more queries), LONGEST_FIRST (causal query tiles in decreasing order of their key blocks).
`ablations(head_dim, causal)` in the recipe file lists the configs the benchmark compares.

The per-key-block instruction budget of the main loop, read from the SASS against the ideal
count, is recorded in docs/PERFORMANCE.md (FlashAttention section), where measured tables
live with their commit.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, replace

import layoutkit as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle, composition

SW128 = Swizzle(3, 3, 3)       # the 128-byte swizzle on bf16 element offsets
ATOM = 64                      # bf16 elements in one 128-byte swizzled row
WG_ROWS = 64                   # query rows of one consumer warpgroup (one m64 wgmma)
WG_THREADS = 128               # threads of one warpgroup
CONSUMER_COUNTS = (2, 3)       # consumer warpgroups a Config may take (BM = 64 * CONSUMERS)
CONSUMERS = 2                  # the default's
BM = CONSUMERS * WG_ROWS       # query rows per CTA of the default
HEAD_DIMS = (64, 128, 256)
LOG2E, LN2 = math.log2(math.e), math.log(2.0)
NEG_INF = float("-inf")
REGISTER_FILE = 65536          # 32-bit registers of one SM, all a CTA's warpgroups share
# (producer, consumer) registers per thread where a Config leaves them None: 3 consumers
# share 65536 - 128 * 32 among 384 threads, 160 each
ROLE_REGISTERS = {2: (24, 240), 3: (32, 160)}
EPILOGUE_BARRIER = 1           # named barrier ids: EPILOGUE_BARRIER + wg, then pingpong_barrier


def pingpong_barrier(consumers: int, wg: int) -> int:
    """The named barrier consumer warpgroup wg (mod consumers) waits at for its turn: the ids
    after the consumers' epilogue barriers."""
    return EPILOGUE_BARRIER + consumers + wg % consumers


def warps(consumers: int) -> int:
    """Warps of the CTA: the producer warpgroup and `consumers` consumer warpgroups."""
    return 4 * (1 + consumers)


PINGPONG_BARRIER = pingpong_barrier(CONSUMERS, 0)      # the default's first ping-pong id


@dataclass(frozen=True)
class Config:
    """One pipeline configuration; every field is a constexpr of the kernel."""

    BN: int = 128
    STAGES: int = 2
    OVERLAP: bool = True
    PINGPONG: bool = True
    PRODUCER_REGISTERS: int | None = None    # None: ROLE_REGISTERS[CONSUMERS]
    CONSUMER_REGISTERS: int | None = None
    CONSUMERS: int = 2                       # consumer warpgroups, 64 query rows each
    # causal: query tiles launch longest first (the last tile sees the most keys), so the
    # shortest tiles fill the last wave; False: in block-index order (query_tile)
    LONGEST_FIRST: bool = True

    def __post_init__(self):
        if self.CONSUMERS not in CONSUMER_COUNTS or isinstance(self.CONSUMERS, bool):
            raise ValueError(f"Config: CONSUMERS = {self.CONSUMERS!r} is not one of "
                             f"{CONSUMER_COUNTS} (consumer warpgroups of 64 query rows)")
        producer, consumer = ROLE_REGISTERS[self.CONSUMERS]
        if self.PRODUCER_REGISTERS is None:
            object.__setattr__(self, "PRODUCER_REGISTERS", producer)
        if self.CONSUMER_REGISTERS is None:
            object.__setattr__(self, "CONSUMER_REGISTERS", consumer)
        total = WG_THREADS * (self.PRODUCER_REGISTERS + self.CONSUMERS * self.CONSUMER_REGISTERS)
        if total > REGISTER_FILE:
            raise ValueError(
                f"Config: PRODUCER_REGISTERS = {self.PRODUCER_REGISTERS} and CONSUMER_REGISTERS "
                f"= {self.CONSUMER_REGISTERS} at CONSUMERS = {self.CONSUMERS} need {total} "
                f"registers, over the SM's {REGISTER_FILE}: 128 * (producer + CONSUMERS * "
                f"consumer) must fit (leave both None for {ROLE_REGISTERS[self.CONSUMERS]})")

    @property
    def BM(self) -> int:
        """Query rows per CTA."""
        return WG_ROWS * self.CONSUMERS

    def with_consumers(self, consumers: int) -> "Config":
        """This pipeline at `consumers` consumer warpgroups, with that count's default register
        budgets (ROLE_REGISTERS)."""
        return replace(self, CONSUMERS=consumers, PRODUCER_REGISTERS=None,
                       CONSUMER_REGISTERS=None)

    def smem_bytes(self, head_dim: int) -> int:
        """Q tile (reused for O) and the K and V rings, bytes."""
        return 2 * head_dim * (self.BM + 2 * self.STAGES * self.BN)


def tile_layout(rows: int, head_dim: int, stages: int | None = None) -> ComposedLayout:
    """rows x head_dim bf16 (x stages), head_dim contiguous in 64-element column blocks of 128-
    byte swizzled rows (TMA boxes {64, rows}), with two size-1 modes for the head and batch
    modes of the (seqlen, head_dim, heads, batch) global tensor: the K-major wgmma operand of
    Q and K, and (transposed) the MN-major operand V."""
    shape = (rows, (ATOM, head_dim // ATOM), 1, 1)
    stride = (ATOM, (1, rows * ATOM), 0, 0)
    if stages is not None:
        shape, stride = shape + (stages,), stride + (rows * head_dim,)
    return ComposedLayout(SW128, 0, Layout(shape, stride))


def row_col(tv: lk.TVLayout, tid):
    """For a TV layout over a (rows, cols) tile: the (row, col) of this thread's value 0 (kernel
    integers of `tid`) and each value's (row, col) offset from it (ints)."""
    rows, cols = tv.tile
    out = []
    for strides in ((1, 0), (0, 1)):
        sub, first = composition(Layout((rows, cols), strides), tv.layout).slice_and_offset(
            (tid, None))
        out.append((first, [int(sub(v)) for v in range(tv.num_values)]))
    (row0, drow), (col0, dcol) = out
    return row0, col0, drow, dcol


def key_blocks(sq, sk, m_blk, bn: int, causal: bool, bm: int = BM):
    """(n_end, n_masked, diag1) of query tile m_blk (bm rows), kernel integers of the sequence
    lengths: the CTA runs key blocks j = n_end-1 .. 0, the first n_masked of them (ring steps 0
    .. n_masked-1) masked. Causal attention is bottom-right aligned: row r sees the keys below
    r + diag1, diag1 = sk - sq + 1; block j needs no mask while (j+1)*bn <= m_blk*bm + diag1
    (the tile's first row) and (j+1)*bn <= sk. n_end >= 1: a tile whose rows see no key (sk =
    0, or causal rows above the diagonal) runs one fully masked block, which gives O = 0, lse =
    -inf."""
    blocks = -(-sk // bn)
    if not causal:
        return lk.maximum(blocks, 1), 1, None
    diag1, first_row = sk - sq + 1, m_blk * bm
    n_end = lk.maximum(lk.minimum(blocks, -(-(first_row + bm - 1 + diag1) // bn)), 1)
    unmasked = lk.maximum(lk.minimum((first_row + diag1) // bn, sk // bn), 0)
    return n_end, lk.maximum(n_end - unmasked, 1), diag1


def attention_body(q: lk.Tensor[lk.bf16, 4], k: lk.Tensor[lk.bf16, 4], v: lk.Tensor[lk.bf16, 4],
                   o: lk.Tensor[lk.bf16, 4], lse: lk.Tensor[lk.f32, 2], GROUP: lk.i32,
                   SCALE_LOG2: lk.f32, D: lk.constexpr, BN: lk.constexpr, STAGES: lk.constexpr,
                   CAUSAL: lk.constexpr, OVERLAP: lk.constexpr, PINGPONG: lk.constexpr,
                   PRODUCER_REGISTERS: lk.constexpr, CONSUMER_REGISTERS: lk.constexpr,
                   CONSUMERS: lk.constexpr, LONGEST_FIRST: lk.constexpr):
    """The kernel (see the module docstring), launched with warps(CONSUMERS) warps. q, o are
    (batch, seqlen_q, heads_q, head_dim), k, v (batch, seqlen_k, heads_kv, head_dim), head_dim
    contiguous (= D), lse (batch * heads_q, seqlen_q); query head h reads key/value head h //
    GROUP. Grid (ceil(seqlen_q / BM), heads_q, batch), BM = 64 * CONSUMERS. This CTA runs
    n_end key blocks, j = n_end-1 .. 0 as ring steps i = n_end-1-j, the
    first n_masked of them masked (`key_blocks`; non-causal: only the first, which may be
    ragged); every count is kernel arithmetic on the sequence lengths and the tile index."""
    # the kernel's mode order: (seqlen, head_dim, heads, batch), head_dim TMA's inner dimension
    Q, K, V, O = (x.permute(1, 3, 2, 0) for x in (q, k, v, o))
    LSE = lse.permute(1, 0)                       # (seqlen_q, batch * heads_q)
    SQ, SK, HQ = q.shape[1], k.shape[1], q.shape[2]
    BM = WG_ROWS * CONSUMERS
    buffers = shared_buffers(D, BN, STAGES, CONSUMERS)
    m_blk = query_tile(SQ, BM, CAUSAL and LONGEST_FIRST)
    h, b = lk.block_id(1), lk.block_id(2)
    hk = h // GROUP
    n_end, n_masked, DIAG1 = key_blocks(SQ, SK, m_blk, BN, CAUSAL, BM)
    roles(Env(**buffers, **locals()))


def query_tile(sq, bm: int, longest_first: bool):
    """This CTA's query tile of the ceil(sq / bm) along grid x: block_id(0), or reversed
    (longest_first: causal tile t sees about t + 1 key blocks, and the hardware starts CTAs in
    block-index order, so the longest go first and the shortest fill the last wave; a CTA
    past the tiles, as in a varlen batch's shorter sequences, gets a negative tile)."""
    return -(-sq // bm) - 1 - lk.block_id(0) if longest_first else lk.block_id(0)


def shared_buffers(D: int, BN: int, STAGES: int, consumers: int = CONSUMERS) -> dict:
    """The Q tile of 64 * consumers rows (then O), the K and V rings and their mbarriers,
    initialised (every thread passes the barrier after the init): {name: tensor or barrier
    array}."""
    sQ = lk.shared_tensor(tile_layout(WG_ROWS * consumers, D), lk.bf16, name="sQ")  # Q, then O
    sK = lk.shared_tensor(tile_layout(BN, D, STAGES), lk.bf16, name="sK")
    sV = lk.shared_tensor(tile_layout(BN, D, STAGES), lk.bf16, name="sV")
    q_full = lk.sm90.mbarrier_array(1, 1, name="q_full")
    k_full = lk.sm90.mbarrier_array(STAGES, 1, name="k_full")       # producer arrive + TMA bytes
    v_full = lk.sm90.mbarrier_array(STAGES, 1, name="v_full")
    k_empty = lk.sm90.mbarrier_array(STAGES, consumers * 4, name="k_empty")  # one per consumer warp
    v_empty = lk.sm90.mbarrier_array(STAGES, consumers * 4, name="v_empty")
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.mbarrier_init(q_full, k_full, v_full, k_empty, v_empty)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    return dict(sQ=sQ, sK=sK, sV=sV, q_full=q_full, k_full=k_full, v_full=v_full,
                k_empty=k_empty, v_empty=v_empty)


def roles(e: "Env", live=None, kind: type | None = None) -> None:
    """The warp roles on the kernel's tensors, buffers and block indices `e`: the producer
    warpgroup and one role per consumer warpgroup (wg is a trace-time int), each doing its work
    only where `live` holds (None: always); `kind` is the consumer's class (Consumer)."""
    with lk.sm90.warp_role("producer", warpgroups=(0,), registers=e.PRODUCER_REGISTERS):
        with _where(live), lk.if_(lk.eq(lk.warp_id(), 0)):
            produce(e)
    for wg in range(e.CONSUMERS):
        with lk.sm90.warp_role(f"consumer{wg}", warpgroups=(1 + wg,),
                               registers=e.CONSUMER_REGISTERS):
            with _where(live):
                consumer(wg, e, kind or Consumer)


def _where(cond):
    return contextlib.nullcontext() if cond is None else lk.if_(cond)


def produce(e: "Env") -> None:
    """The producer warp's loop (module docstring): Q once, then K_j and V_j for j = n_end-1 ..
    0 through the rings."""
    with lk.sm90.elect_one(), lk.sm90.expect_tx(e.q_full[0]):
        lk.sm90.tma_load(e.sQ, e.Q.tile((e.BM, e.D, 1, 1), (e.m_blk, 0, e.h, e.b)), e.q_full[0])
    for i in lk.range(0, e.n_end):
        j = e.n_end - 1 - i
        p = lk.sm90.producer_state(i, e.STAGES)
        lk.sm90.mbarrier_wait(e.k_empty[p.stage], p.phase)
        with lk.sm90.elect_one(), lk.sm90.expect_tx(e.k_full[p.stage]):
            lk.sm90.tma_load(e.sK[:, :, :, :, p.stage],
                             e.K.tile((e.BN, e.D, 1, 1), (j, 0, e.hk, e.b)), e.k_full[p.stage])
        lk.sm90.mbarrier_wait(e.v_empty[p.stage], p.phase)
        with lk.sm90.elect_one(), lk.sm90.expect_tx(e.v_full[p.stage]):
            lk.sm90.tma_load(e.sV[:, :, :, :, p.stage],
                             e.V.tile((e.BN, e.D, 1, 1), (j, 0, e.hk, e.b)), e.v_full[p.stage])


def release(ring, stage) -> None:
    """This warp's wgmmas are done reading `stage` of `ring` (after lk.sm90.wgmma_wait): one elected
    arrive per consumer warp."""
    with lk.sm90.elect_one():
        lk.sm90.mbarrier_arrive(ring[stage])


class Env:
    """The kernel's parameters, tensors, barriers and block indices, by name (for the roles)."""

    def __init__(self, **names):
        self.__dict__.update(names)


class Consumer:
    """Consumer warpgroup `wg`'s part of the kernel, traced inside its role: the wgmma issue
    steps, the online softmax and the epilogue (see the module docstring)."""

    def __init__(self, wg: int, e: Env):
        self.wg, self.e = wg, e
        self.sQ2 = e.sQ[:, :, 0, 0].tile((WG_ROWS, e.D), (wg, 0))     # this warpgroup's Q rows
        self.c = e.SCALE_LOG2
        self.neg_c = e.SCALE_LOG2 * -1.0
        self.s_layout = lk.sm90.wgmma_accumulator_layout(e.BN)
        self.o_layout = lk.sm90.wgmma_accumulator_layout(e.D)
        self.row0, self.col0, self.drow, self.dcol = row_col(self.s_layout,
                                                             lk.sm90.thread_id_in_warpgroup())
        self.first_row = e.m_blk * e.BM + wg * WG_ROWS + self.row0

    # ---- ping-pong: the consumer warpgroups take turns issuing their wgmmas, in a ring -----
    def turn(self) -> None:
        """Wait until the previous warpgroup of the ring has issued its wgmmas."""
        if self.e.PINGPONG:
            lk.sm90.named_barrier_sync(pingpong_barrier(self.e.CONSUMERS, self.wg),
                                       2 * WG_THREADS)

    def pass_turn(self) -> None:
        """Give the turn to the next warpgroup of the ring."""
        if self.e.PINGPONG:
            lk.sm90.named_barrier_arrive(pingpong_barrier(self.e.CONSUMERS, self.wg + 1),
                                         2 * WG_THREADS)

    # ---- wgmma issue (not waited) --------------------------------------------------------
    def scores(self, i, j):
        """Issue S = Q K_j^T (ring step i) into a fresh accumulator; returns (S, K stage)."""
        e = self.e
        s = lk.sm90.consumer_state(i, e.STAGES)
        lk.sm90.mbarrier_wait(e.k_full[s.stage], s.phase)
        lk.sm90.wgmma_fence()
        acc = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(e.BN), self.sQ2, e.sK[:, :, 0, 0, s.stage],
                       accumulate=False)
        lk.sm90.wgmma_commit()
        return acc, s.stage

    def pv(self, O, P, i):
        """Issue O += P V (V of ring step i; P the bf16 register A operand); returns (O, V
        stage)."""
        e = self.e
        s = lk.sm90.consumer_state(i, e.STAGES)
        lk.sm90.mbarrier_wait(e.v_full[s.stage], s.phase)
        lk.sm90.wgmma_fence()                        # also orders the O rescale before the wgmma
        O = lk.sm90.wgmma(O, P, e.sV[:, :, 0, 0, s.stage].T, accumulate=True)
        lk.sm90.wgmma_commit()
        return O, s.stage

    # ---- online softmax ------------------------------------------------------------------
    def mask(self, S, j):
        """S with -inf where key j*BN + col is past SK or (causal) past the row's diagonal."""
        e = self.e
        limits = {}
        for r in sorted(set(self.drow)):
            limit = lk.cast(e.SK - j * e.BN - self.col0, lk.i32)
            if e.CAUSAL:
                limit = lk.minimum(limit, lk.cast(self.first_row + r + e.DIAG1 - j * e.BN -
                                                  self.col0, lk.i32))
            limits[r] = limit
        keep = lk.RegisterTensor(lk.bool_, S.layout,
                                 [(limits[r] > dc).value for r, dc in zip(self.drow, self.dcol)])
        return lk.where(keep, S, NEG_INF)

    def softmax(self, S, m_old, l_old, masked: bool, j):
        """One online-softmax step on the scores S: (P f32, m, l, alpha); alpha is None on the
        first block. m is the row max in score units (-inf while a row has seen no key); l is
        each thread's partial row sum (lk.thread_sum), reduced across the quad once, in the
        epilogue. Unmasked blocks hold finite scores, so their m is finite and needs no -inf
        guard; masked blocks use 0 in the exponent for a row still all -inf (no -inf - -inf)."""
        if masked:
            S = self.mask(S, j)
        m = lk.reduce_max(S, 1)
        if m_old is not None:
            m = lk.maximum(m, m_old)
        m_use = lk.where(m > NEG_INF, m, 0.0) if masked else m
        neg_mc = m_use * self.neg_c
        P = lk.exp2(lk.fma(S, self.c, lk.broadcast(neg_mc, S.layout)), ftz=True)
        row_sum = lk.thread_sum(P, 1)
        if m_old is None:
            return P, m, row_sum, None
        alpha = lk.exp2(lk.fma(m_old, self.c, neg_mc), ftz=True)    # m_old = -inf: 0
        return P, m, l_old * lk.broadcast(alpha, row_sum.layout) + row_sum, alpha

    # ---- the pipeline ----------------------------------------------------------------------
    def prologue(self):
        """Block n_end - 1 (ring step 0, masked: it may be a boundary block): returns the carry
        (O, P, m, l, alpha)."""
        e = self.e
        lk.sm90.mbarrier_wait(e.q_full[0], 0)
        if e.PINGPONG and self.wg == e.CONSUMERS - 1:     # warpgroup 0 issues first
            lk.sm90.named_barrier_arrive(pingpong_barrier(e.CONSUMERS, 0), 2 * WG_THREADS)
        self.turn()
        S, k_stage = self.scores(0, e.n_end - 1)
        self.pass_turn()
        lk.sm90.wgmma_wait(0)
        release(e.k_empty, k_stage)
        P, m, l, _ = self.softmax(S, None, None, True, e.n_end - 1)
        return lk.full(self.o_layout, 0.0), lk.cast(P, lk.bf16), m, l, lk.full(m.layout, 1.0)

    def step(self, i, j, carry, masked: bool):
        """Ring step i >= 1 on key block j: S_i issued, then O rescaled (in place, under S_i's
        wgmma) and P_{i-1} V_{i-1} issued; returns the new carry."""
        O, P, m, l, alpha = carry
        previous = i - 1
        self.turn()
        if self.e.OVERLAP:
            S, k_stage = self.scores(i, j)
            O = O * lk.broadcast(alpha, self.o_layout)
            O, v_stage = self.pv(O, P, previous)
            self.pass_turn()
            lk.sm90.wgmma_wait(1)                    # S done; P V still running under the softmax
            release(self.e.k_empty, k_stage)
            P_new, m, l, alpha = self.softmax(S, m, l, masked, j)
            lk.sm90.wgmma_wait(0)                    # P V done reading P: P_new may take its place
            release(self.e.v_empty, v_stage)
        else:
            O = O * lk.broadcast(alpha, self.o_layout)
            O, v_stage = self.pv(O, P, previous)
            S, k_stage = self.scores(i, j)
            self.pass_turn()
            lk.sm90.wgmma_wait(0)
            release(self.e.v_empty, v_stage)
            release(self.e.k_empty, k_stage)
            P_new, m, l, alpha = self.softmax(S, m, l, masked, j)
        return O, lk.cast(P_new, lk.bf16), m, l, alpha

    def main_loops(self, carry):
        """The masked blocks after the first (ring steps 1 .. n_masked-1), then the unmasked
        ones (n_masked .. n_end-1); returns the carry after the last."""
        e = self.e
        for masked, start, stop in ((True, 1, e.n_masked), (False, e.n_masked, e.n_end)):
            loop = lk.range(start, stop, carry=carry)
            for i, values in loop:
                loop.next(*self.step(i, e.n_end - 1 - i, values, masked))
            carry = loop.results
        return carry

    def normalized(self, O, m, l):
        """(O / l, the rows' lse in natural log) from the running max m (score units) and the
        per-thread row sums l; a row with l = 0 (no key seen) gets O = 0 and lse = -inf."""
        l = lk.reduce_sum(l, 1)             # the quad's partial row sums, once
        seen = l > 0.0
        inv_l = lk.where(seen, 1.0 / lk.where(seen, l, 1.0), 0.0)
        O = O * lk.broadcast(inv_l, self.o_layout)
        m_use = lk.where(m > NEG_INF, m, 0.0)
        row_lse = lk.where(seen, (m_use * self.c + lk.log2(lk.where(seen, l, 1.0))) * LN2,
                           NEG_INF)
        return O, row_lse

    def epilogue(self, carry) -> None:
        """The last P V, normalisation, lse, O through shared memory and a TMA store."""
        e, wg, o_layout = self.e, self.wg, self.o_layout
        O, P, m, l, alpha = carry
        self.turn()
        O = O * lk.broadcast(alpha, o_layout)
        O, v_stage = self.pv(O, P, e.n_end - 1)
        self.pass_turn()
        lk.sm90.wgmma_wait(0)
        release(e.v_empty, v_stage)
        if e.PINGPONG and wg == 0:          # balances the last warpgroup's opening arrive
            lk.sm90.named_barrier_sync(pingpong_barrier(e.CONSUMERS, 0), 2 * WG_THREADS)
        O, row_lse = self.normalized(O, m, l)
        with lk.if_(lk.eq(lk.lane_id() % 4, 0)):        # one lane of each row's quad
            rows = e.LSE.tile((WG_ROWS, 1), (e.m_blk * e.CONSUMERS + wg, e.h + e.HQ * e.b))
            lk.store(rows.partition(row_lse.layout), row_lse)
        lk.sm90.named_barrier_sync(EPILOGUE_BARRIER + wg, WG_THREADS)   # this wg's Q reads retired
        lk.store(self.sQ2.partition(o_layout), lk.cast(O, lk.bf16))
        self.store_o()

    def store_o(self) -> None:
        """This warpgroup's O rows, in sQ2 (written by its threads), to global memory: the async
        proxy's fence, then one thread's TMA store."""
        e, wg = self.e, self.wg
        lk.sm90.fence_proxy_async()
        lk.sm90.named_barrier_sync(EPILOGUE_BARRIER + wg, WG_THREADS)
        with lk.if_(lk.eq(lk.sm90.thread_id_in_warpgroup(), 0)):
            lk.sm90.tma_store(e.O.tile((WG_ROWS, e.D, 1, 1),
                                       (e.m_blk * e.CONSUMERS + wg, 0, e.h, e.b)),
                              e.sQ.tile((WG_ROWS, e.D, 1, 1), (wg, 0, 0, 0)))
            lk.sm90.tma_store_commit()
            lk.sm90.tma_store_wait(0)


def consumer(wg: int, e: Env, kind: type = Consumer) -> None:
    """The body of consumer warpgroup `wg` (an instance of `kind`), traced inside its role."""
    c = kind(wg, e)
    c.epilogue(c.main_loops(c.prologue()))


WARPS = warps(CONSUMERS)       # the default's
# one kernel object per consumer count (num_warps fixes the block size); attention_kernel is
# the default's, kernel_for(cfg) any config's
attention_kernels = {n: lk.kernel(attention_body, num_warps=warps(n)) for n in CONSUMER_COUNTS}
attention_kernel = attention_kernels[CONSUMERS]


def kernel_for(cfg: Config):
    """The attention kernel object launched for cfg (its block has warps(cfg.CONSUMERS) warps)."""
    return attention_kernels[cfg.CONSUMERS]
