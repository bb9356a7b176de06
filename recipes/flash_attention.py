"""FlashAttention-3-class forward attention for Hopper: O = softmax(Q K^T * scale) V and the
log-sum-exp of every row, bf16 in and out, f32 accumulation and softmax.

Tensors are (batch, seqlen, heads, head_dim) like FlashAttention's API (any strides with a
contiguous head_dim; `layout="bhsd"` takes torch SDPA's (batch, heads, seqlen, head_dim)
instead); K and V may have fewer heads than Q (grouped-query attention: query head h reads
key/value head h // (heads_q // heads_kv)); seqlen_q and seqlen_k may differ and need not be
tile multiples. Causal masking is bottom-right aligned (FlashAttention >= 2.1): query i sees
keys j <= i + seqlen_k - seqlen_q. Rows that see no key get O = 0 and lse = -inf.

One CTA per (128-row query tile, head, batch); 3 warpgroups (every line below is in the kernel):

    warpgroup 0, producer (PRODUCER_REGISTERS): one elected thread loads the Q tile once
        (q_full), then per key block j = n_end-1 .. 0 (ring counter i): wait k_empty[s] ->
        expect_tx(k_full[s]) { TMA K_j }; wait v_empty[s] -> expect_tx(v_full[s]) { TMA V_j }
    warpgroups 1, 2, consumers (CONSUMER_REGISTERS), 64 query rows each:
        prologue   S_0 = Q K_0^T; softmax(S_0) -> m, l, P_0
        per block  [ping-pong: wait my turn]  S_i = Q K_i^T (SS wgmma, issued)
                   O *= alpha_{i-1} (in place, under S_i); O += P_{i-1} V_{i-1} (RS wgmma: P
                   from registers, issued)
                   [ping-pong: the other warpgroup's turn]
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
order inside a warpgroup), PINGPONG (the two consumer warpgroups take turns issuing wgmmas
through named barriers so one's softmax runs under the other's matrix work), register budgets.
`ablations(head_dim, causal)` lists the configs the benchmark compares.

Instruction budget per key block per consumer warp, main loop, from the SASS (ptxas 13.0, sm_90a,
`layoutkit compile flash_attention --sass`), head dim 128, non-causal. Ideal per 64 rows x BN
keys (2 rows x BN/4 scores per thread): BN/4*2 FFMA + MUFU.EX2 (scores), (BN/4-1)*2 FMNMX and
FADD (the in-thread trees), 2 SHFL + 2 FMNMX per row (quad max), 64 FMUL (O rescale), BN/4 F2FP.

    | BN=128                   | before | after | ideal | BN=176 after |
    |--------------------------|-------:|------:|------:|-------------:|
    | all instructions         |    492 |   480 |       | 593 (431/128 keys) |
    | HGMMA (SS + RS)          |  8 + 8 | 8 + 8 | 8 + 8 |       8 + 11 |
    | MUFU.EX2 (P + alpha)     |     66 |    66 |    66 |           90 |
    | FFMA (P + alpha + l)     |     66 |    68 |    68 |           92 |
    | FMUL (O rescale + -m*c)  |     68 |    66 |    66 |           66 |
    | FADD (row sums)          |     68 |    62 |    62 |           86 |
    | FMNMX                    |     68 |    68 |    68 |           92 |
    | SHFL.BFLY                |      8 |     4 |     4 |            4 |
    | F2FP.BF16 pack           |     32 |    32 |    32 |           44 |
    | FSETP + FSEL (-inf guard)|  2 + 2 |     0 |     0 |            0 |
    | register MOVs, loop edge |      4 |     6 |     0 |            6 |
    | UR -> R (mbarrier operands) |   5 |     6 |       |            6 |
    | uniform (wgmma descriptors, ring stage/phase) | 67 | 67 | | 66 |
    | WARPGROUP.ARRIVE / DEPBAR|  3 / 2 | 3 / 2 | 2 / 2 |        3 / 2 |
    | SYNCS (2 waits, 2 arrives) |    4 |     4 |     4 |            4 |
    | BAR (ping-pong sync + arrive) | 2 |     2 |     2 |            2 |

"before" is commit b3fab6c (row sums shuffled every block, alpha as FADD + FMUL, the -inf guard
in every block). O (R24-R87) and S (R88-R151) stay in place across the loop; no spills, no C75xx
infos. Left: a few MOVs where ptxas parks an O value and P's first pair at the loop edge (they
cost a third WARPGROUP.ARRIVE), and the SS wgmma's 64-bit descriptor advance (UIADD3 + UIADD3.X
+ UMOV per instruction for Q, UIADD3.64 for K; a 32-bit add of the low word would do), which is
the DSL's wgmma lowering.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import layoutkit as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle, composition

SW128 = Swizzle(3, 3, 3)       # the 128-byte swizzle on bf16 element offsets
ATOM = 64                      # bf16 elements in one 128-byte swizzled row
WG_ROWS = 64                   # query rows of one consumer warpgroup (one m64 wgmma)
CONSUMERS = 2
BM = CONSUMERS * WG_ROWS       # query rows per CTA
HEAD_DIMS = (64, 128, 256)
LOG2E, LN2 = math.log2(math.e), math.log(2.0)
NEG_INF = float("-inf")
EPILOGUE_BARRIER, PINGPONG_BARRIER = 1, 1 + CONSUMERS   # named barrier ids (+ warpgroup index)


@dataclass(frozen=True)
class Config:
    """One pipeline configuration; every field is a constexpr of the kernel."""

    BN: int = 128
    STAGES: int = 2
    OVERLAP: bool = True
    PINGPONG: bool = True
    PRODUCER_REGISTERS: int = 24
    CONSUMER_REGISTERS: int = 240

    def smem_bytes(self, head_dim: int) -> int:
        """Q tile (reused for O) and the K and V rings, bytes."""
        return 2 * head_dim * (BM + 2 * self.STAGES * self.BN)


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


def attention_body(q: lk.Pointer[lk.bf16], k: lk.Pointer[lk.bf16], v: lk.Pointer[lk.bf16],
                   o: lk.Pointer[lk.bf16], lse: lk.Pointer[lk.f32],
                   SQ: lk.i32, SK: lk.i32, HQ: lk.i32, HK: lk.i32, BATCH: lk.i32,
                   GROUP: lk.i32, Q_SS: lk.i32, Q_SH: lk.i32, Q_SB: lk.i32,
                   K_SS: lk.i32, K_SH: lk.i32, K_SB: lk.i32, V_SS: lk.i32, V_SH: lk.i32,
                   V_SB: lk.i32, O_SS: lk.i32, O_SH: lk.i32, O_SB: lk.i32, LSE_SROW: lk.i32,
                   N_MASKED: lk.i32, N_REST1: lk.i32, DIAG1: lk.i32, SCALE_LOG2: lk.f32,
                   D: lk.constexpr, BN: lk.constexpr, STAGES: lk.constexpr,
                   CAUSAL: lk.constexpr, OVERLAP: lk.constexpr, PINGPONG: lk.constexpr,
                   PRODUCER_REGISTERS: lk.constexpr, CONSUMER_REGISTERS: lk.constexpr):
    """The kernel (see the module docstring). Grid (ceil(SQ/128), HQ, BATCH). This CTA runs
    n_end key blocks, j = n_end-1 .. 0 as ring steps i = n_end-1-j: first N_MASKED masked ones,
    then N_REST1 - 1 (+ m*BM/BN when causal, m the query tile) that need no mask. Non-causal:
    N_MASKED = 1 (the last block may be ragged), N_REST1 = ceil(SK/BN). Causal (BN divides
    BM): DIAG1 = SK - SQ + 1 >= 1 (the host strips query rows that see no key), so row r sees
    keys < min(SK, r + DIAG1); see `block_counts`. The loop bounds are sums of independent
    parameters, so every choice of them is one consistent protocol (the static check picks
    its own)."""
    Q = lk.global_tensor(q, Layout((SQ, D, HQ, BATCH), (Q_SS, 1, Q_SH, Q_SB)))
    K = lk.global_tensor(k, Layout((SK, D, HK, BATCH), (K_SS, 1, K_SH, K_SB)))
    V = lk.global_tensor(v, Layout((SK, D, HK, BATCH), (V_SS, 1, V_SH, V_SB)))
    O = lk.global_tensor(o, Layout((SQ, D, HQ, BATCH), (O_SS, 1, O_SH, O_SB)))
    LSE = lk.global_tensor(lse, Layout((SQ, HQ * BATCH), (1, LSE_SROW)))
    sQ = lk.shared_tensor(tile_layout(BM, D), lk.bf16, name="sQ")       # Q, then O
    sK = lk.shared_tensor(tile_layout(BN, D, STAGES), lk.bf16, name="sK")
    sV = lk.shared_tensor(tile_layout(BN, D, STAGES), lk.bf16, name="sV")
    q_full = lk.mbarrier_array(1, 1, name="q_full")
    k_full = lk.mbarrier_array(STAGES, 1, name="k_full")       # producer arrive + TMA bytes
    v_full = lk.mbarrier_array(STAGES, 1, name="v_full")
    k_empty = lk.mbarrier_array(STAGES, CONSUMERS * 4, name="k_empty")  # one per consumer warp
    v_empty = lk.mbarrier_array(STAGES, CONSUMERS * 4, name="v_empty")
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.mbarrier_init(q_full, k_full, v_full, k_empty, v_empty)
        lk.fence_mbarrier_init()
    lk.barrier()
    m_blk, h, b = lk.block_id(0), lk.block_id(1), lk.block_id(2)
    hk = h // GROUP
    n_end = N_MASKED + N_REST1 - 1 + (m_blk * (BM // BN) if CAUSAL else 0)

    with lk.warp_role("producer", warpgroups=(0,), registers=PRODUCER_REGISTERS):
        with lk.if_(lk.eq(lk.warp_id(), 0)):
            with lk.elect_one(), lk.expect_tx(q_full[0]):
                lk.tma_load(sQ, Q.tile((BM, D, 1, 1), (m_blk, 0, h, b)), q_full[0])
            for i in lk.range(0, n_end):
                j = n_end - 1 - i
                p = lk.producer_state(i, STAGES)
                lk.mbarrier_wait(k_empty[p.stage], p.phase)
                with lk.elect_one(), lk.expect_tx(k_full[p.stage]):
                    lk.tma_load(sK[:, :, :, :, p.stage], K.tile((BN, D, 1, 1), (j, 0, hk, b)),
                                k_full[p.stage])
                lk.mbarrier_wait(v_empty[p.stage], p.phase)
                with lk.elect_one(), lk.expect_tx(v_full[p.stage]):
                    lk.tma_load(sV[:, :, :, :, p.stage], V.tile((BN, D, 1, 1), (j, 0, hk, b)),
                                v_full[p.stage])

    for wg in range(CONSUMERS):     # one role per consumer warpgroup: wg is a trace-time int
        with lk.warp_role(f"consumer{wg}", warpgroups=(1 + wg,), registers=CONSUMER_REGISTERS):
            consumer(wg, Env(**locals()))


def release(ring, stage) -> None:
    """This warp's wgmmas are done reading `stage` of `ring` (after lk.wgmma_wait): one elected
    arrive per consumer warp."""
    with lk.elect_one():
        lk.mbarrier_arrive(ring[stage])


class Env:
    """The kernel's parameters, tensors, barriers and block indices, by name (for consumer)."""

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
        self.s_layout = lk.wgmma_accumulator_layout(e.BN)
        self.o_layout = lk.wgmma_accumulator_layout(e.D)
        self.row0, self.col0, self.drow, self.dcol = row_col(self.s_layout,
                                                             lk.thread_id_in_warpgroup())
        self.first_row = e.m_blk * BM + wg * WG_ROWS + self.row0

    # ---- ping-pong: the two consumer warpgroups take turns issuing their wgmmas ------------
    def turn(self) -> None:
        """Wait until the other warpgroup has issued its wgmmas."""
        if self.e.PINGPONG:
            lk.named_barrier_sync(PINGPONG_BARRIER + self.wg, 2 * 128)

    def pass_turn(self) -> None:
        if self.e.PINGPONG:
            lk.named_barrier_arrive(PINGPONG_BARRIER + (self.wg + 1) % CONSUMERS, 2 * 128)

    # ---- wgmma issue (not waited) --------------------------------------------------------
    # Ring step i has the stage and phase of counter i + 2 * STAGES (a whole lap later): the
    # DSL proves such a sum of kernel integers non-negative term by term (n_end - 1 + 4 >= 0).
    def scores(self, i, j):
        """Issue S = Q K_j^T (ring step i) into a fresh accumulator; returns (S, K stage)."""
        e = self.e
        s = lk.consumer_state(i + 2 * e.STAGES, e.STAGES)
        lk.mbarrier_wait(e.k_full[s.stage], s.phase)
        lk.wgmma_fence()
        acc = lk.wgmma(lk.wgmma_accumulator(e.BN), self.sQ2, e.sK[:, :, 0, 0, s.stage],
                       accumulate=False)
        lk.wgmma_commit()
        return acc, s.stage

    def pv(self, O, P, i):
        """Issue O += P V (V of ring step i; P the bf16 register A operand); returns (O, V
        stage)."""
        e = self.e
        s = lk.consumer_state(i + 2 * e.STAGES, e.STAGES)
        lk.mbarrier_wait(e.v_full[s.stage], s.phase)
        lk.wgmma_fence()                        # also orders the O rescale before the wgmma
        O = lk.wgmma(O, P, e.sV[:, :, 0, 0, s.stage].T, accumulate=True)
        lk.wgmma_commit()
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
        lk.mbarrier_wait(e.q_full[0], 0)
        if e.PINGPONG and self.wg == 1:         # warpgroup 0 issues first
            lk.named_barrier_arrive(PINGPONG_BARRIER, 2 * 128)
        self.turn()
        S, k_stage = self.scores(0, e.n_end - 1)
        self.pass_turn()
        lk.wgmma_wait(0)
        release(e.k_empty, k_stage)
        P, m, l, _ = self.softmax(S, None, None, True, e.n_end - 1)
        return lk.full(self.o_layout, 0.0), lk.cast(P, lk.bf16), m, l, lk.full(m.layout, 1.0)

    def step(self, previous, j, carry, masked: bool):
        """Ring step i = previous + 1 on key block j: S_i issued, then O rescaled (in place,
        under S_i's wgmma) and P_{i-1} V_{i-1} issued; returns the new carry."""
        O, P, m, l, alpha = carry
        i = previous + 1
        self.turn()
        if self.e.OVERLAP:
            S, k_stage = self.scores(i, j)
            O = O * lk.broadcast(alpha, self.o_layout)
            O, v_stage = self.pv(O, P, previous)
            self.pass_turn()
            lk.wgmma_wait(1)                    # S done; P V still running under the softmax
            release(self.e.k_empty, k_stage)
            P_new, m, l, alpha = self.softmax(S, m, l, masked, j)
            lk.wgmma_wait(0)                    # P V done reading P: P_new may take its place
            release(self.e.v_empty, v_stage)
        else:
            O = O * lk.broadcast(alpha, self.o_layout)
            O, v_stage = self.pv(O, P, previous)
            S, k_stage = self.scores(i, j)
            self.pass_turn()
            lk.wgmma_wait(0)
            release(self.e.v_empty, v_stage)
            release(self.e.k_empty, k_stage)
            P_new, m, l, alpha = self.softmax(S, m, l, masked, j)
        return O, lk.cast(P_new, lk.bf16), m, l, alpha

    def main_loops(self, carry):
        """The masked blocks after the first (ring steps 1 .. N_MASKED-1), then the unmasked
        ones; returns the carry after the last."""
        e = self.e
        for masked, start, stop in ((True, 0, e.N_MASKED - 1),
                                    (False, e.N_MASKED - 1, e.n_end - 1)):
            loop = lk.range(start, stop, carry=carry)        # ring step i = previous + 1
            for previous, values in loop:
                loop.next(*self.step(previous, e.n_end - 2 - previous, values, masked))
            carry = loop.results
        return carry

    def epilogue(self, carry) -> None:
        """The last P V, normalisation, lse, O through shared memory and a TMA store."""
        e, wg, o_layout = self.e, self.wg, self.o_layout
        O, P, m, l, alpha = carry
        self.turn()
        O = O * lk.broadcast(alpha, o_layout)
        O, v_stage = self.pv(O, P, e.n_end - 1)
        self.pass_turn()
        lk.wgmma_wait(0)
        release(e.v_empty, v_stage)
        if e.PINGPONG and wg == 0:          # balances the other warpgroup's opening arrive
            lk.named_barrier_sync(PINGPONG_BARRIER, 2 * 128)
        l = lk.reduce_sum(l, 1)             # the quad's partial row sums, once
        seen = l > 0.0
        inv_l = lk.where(seen, 1.0 / lk.where(seen, l, 1.0), 0.0)
        O = O * lk.broadcast(inv_l, o_layout)
        m_use = lk.where(m > NEG_INF, m, 0.0)
        row_lse = lk.where(seen, (m_use * self.c + lk.log2(lk.where(seen, l, 1.0))) * LN2,
                           NEG_INF)
        with lk.if_(lk.eq(lk.lane_id() % 4, 0)):        # one lane of each row's quad
            rows = e.LSE.tile((WG_ROWS, 1), (e.m_blk * CONSUMERS + wg, e.h + e.HQ * e.b))
            lk.store(rows.partition(row_lse.layout), row_lse)
        lk.named_barrier_sync(EPILOGUE_BARRIER + wg, 128)    # every Q read of this wg retired
        lk.store(self.sQ2.partition(o_layout), lk.cast(O, lk.bf16))
        lk.fence_proxy_async()
        lk.named_barrier_sync(EPILOGUE_BARRIER + wg, 128)
        with lk.if_(lk.eq(lk.thread_id_in_warpgroup(), 0)):
            lk.tma_store(e.O.tile((WG_ROWS, e.D, 1, 1), (e.m_blk * CONSUMERS + wg, 0, e.h, e.b)),
                         e.sQ.tile((WG_ROWS, e.D, 1, 1), (wg, 0, 0, 0)))
            lk.tma_store_commit()
            lk.tma_store_wait(0)


def consumer(wg: int, e: Env) -> None:
    """The body of consumer warpgroup `wg`, traced inside its role."""
    c = Consumer(wg, e)
    c.epilogue(c.main_loops(c.prologue()))


WARPS = 4 * (1 + CONSUMERS)
attention_kernel = lk.kernel(attention_body, num_warps=WARPS)


# ---- host side -------------------------------------------------------------------------------
# Defaults per (head dim, causal). Non-causal head dim 128 takes 176-key blocks (FlashAttention-
# 3's choice there): 10% fewer instructions per key than 128 (module docstring's budget) and the
# SS wgmma's Q read amortized over 176 columns. Causal needs BN dividing BM. Head dim 256 is
# bound by shared memory (the 64 KB Q tile and two stages of K and V: 80 keys fill 224 KB) and
# by registers (O alone is 128 f32 per consumer thread; S of 80 keys adds 40).
CONFIGS = {(64, False): Config(BN=128), (64, True): Config(BN=128),
           (128, False): Config(BN=176), (128, True): Config(BN=128),
           (256, False): Config(BN=80), (256, True): Config(BN=64)}
# Where seqlen_k is not a multiple of BN, the last key block computes padding. Non-causal head
# dim 128 may also take 128-key blocks, which cost 1.3% more per key than 176 (the ablation in
# docs/PERFORMANCE.md, seqlen 8k): default_config picks whichever costs less in all.
ALTERNATIVE_BLOCKS = {(128, False): (128, 1.013)}    # (head dim, causal): (BN, cost per key)
ALIGN_ELEMENTS = 8            # TMA: global addresses and strides are multiples of 16 bytes
SHARED_LIMIT = 232448 - 1024  # sm_90's opt-in shared memory, less room for the mbarriers


def default_config(head_dim: int, causal: bool, seqlen_k: int) -> Config:
    """CONFIGS[head_dim, causal], or its ALTERNATIVE_BLOCKS key block where that costs less
    for seqlen_k keys (padding of the last block included).

    >>> [default_config(128, False, sk).BN for sk in (1000, 2048, 4096, 8192, 16384)]
    [128, 128, 128, 176, 176]
    """
    if (head_dim, causal) not in CONFIGS:
        raise ValueError(f"flash_attention: no default config for head_dim = {head_dim!r}, "
                         f"causal = {causal!r}; head_dim is one of {HEAD_DIMS}, causal a bool")
    cfg = CONFIGS[head_dim, causal]
    if (head_dim, causal) in ALTERNATIVE_BLOCKS:
        bn, cost = ALTERNATIVE_BLOCKS[head_dim, causal]
        if -(-seqlen_k // bn) * bn * cost < -(-seqlen_k // cfg.BN) * cfg.BN:
            return replace(cfg, BN=bn)
    return cfg


def ablations(head_dim: int, causal: bool = False) -> dict[str, Config]:
    """The default config and one switched-off pipeline choice per entry (benchmark rows),
    plus 128-key blocks where the default differs and they fit in shared memory (non-causal
    head dim 128, whose default is 176)."""
    base = CONFIGS[head_dim, causal]
    rows = {"default": base, "no ping-pong": replace(base, PINGPONG=False),
            "no intra-warpgroup overlap": replace(base, OVERLAP=False),
            "no ping-pong, no overlap": replace(base, PINGPONG=False, OVERLAP=False),
            "1 stage": replace(base, STAGES=1)}
    bn128 = replace(base, BN=128)
    if base.BN != 128 and bn128.smem_bytes(head_dim) <= SHARED_LIMIT:
        rows["BN=128"] = bn128
    return rows


def block_counts(sq: int, sk: int, causal: bool, bn: int) -> tuple[int, int, int]:
    """(N_MASKED, N_REST1, DIAG1) of the kernel for seqlen_q sq <= (causal) seqlen_k sk.

    Causal, query tile m (rows mBM .. mBM+BM-1, BN dividing BM): key block j is needed while
    j*BN <= mBM + BM-1 + DIAG1-1, so n_end = m*BM/BN + (DIAG1 + BM-2)//BN + 1; it needs no mask
    for any row while (j+1)*BN <= mBM + DIAG1 (which also keeps it inside SK), so the first
    m*BM/BN + DIAG1//BN blocks are unmasked. Blocks past SK in a ragged last tile are masked.

    >>> block_counts(1000, 1000, True, 128), block_counts(1000, 1000, False, 128)
    ((1, 1, 1), (1, 8, 1))
    """
    if not causal:
        return 1, -(-sk // bn), 1
    diag1 = sk - sq + 1
    n_end0 = (diag1 + BM - 2) // bn + 1
    return n_end0 - diag1 // bn, diag1 // bn + 1, diag1


def _strides(x) -> tuple[int, int, int]:
    """(seqlen, heads, batch) element strides of a (batch, seqlen, heads, head_dim) view."""
    return x.stride(1), x.stride(2), x.stride(0)


def kernel_arguments(views, pointers, lse_row: int, causal: bool, scale: float,
                     cfg: Config) -> tuple:
    """(grid, positional arguments, constexprs) of one launch. `views`: q, k, v, o as objects
    with .shape (batch, seqlen, heads, head_dim) and .stride(i) in elements; `pointers`: what
    the kernel gets for q, k, v, o, lse (tensors, or arrays on the CPU interpreter); lse is
    (batch * heads) rows of seqlen_q, `lse_row` elements apart."""
    q, k, v, o = views
    batch, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    n_masked, n_rest1, diag1 = block_counts(sq, sk, causal, cfg.BN)
    args = (*pointers, sq, sk, hq, hk, batch, hq // hk, *_strides(q), *_strides(k),
            *_strides(v), *_strides(o), lse_row, n_masked, n_rest1, diag1, float(scale) * LOG2E)
    constexprs = dict(D=d, BN=cfg.BN, STAGES=cfg.STAGES, CAUSAL=bool(causal),
                      OVERLAP=cfg.OVERLAP, PINGPONG=cfg.PINGPONG,
                      PRODUCER_REGISTERS=cfg.PRODUCER_REGISTERS,
                      CONSUMER_REGISTERS=cfg.CONSUMER_REGISTERS)
    return (-(-sq // BM), hq, batch), args, constexprs


class _Shape:
    """A stand-in tensor (shape and strides) for specializing without torch."""

    def __init__(self, shape, strides=None):
        self.shape = tuple(shape)
        if strides is None:
            strides, run = [], 1
            for n in reversed(self.shape):
                strides.insert(0, run)
                run *= n
        self._strides = tuple(strides)

    def stride(self, i):
        return self._strides[i]


def compile_default() -> dict[str, str]:
    """PTX of the default config of each head dim, non-causal and causal (a (4, 4096, 16, d)
    problem's specialization)."""
    P, F = lk.Pointer[lk.bf16], lk.Pointer[lk.f32]
    out = {}
    for (d, causal), cfg in CONFIGS.items():
        t = _Shape((4, 4096, 16, d))
        grid, args, constexprs = kernel_arguments((t, t, t, t), (P, P, P, P, F), 4096, causal,
                                                  d ** -0.5, cfg)
        name = f"attention_d{d}_bn{cfg.BN}_s{cfg.STAGES}{'_causal' if causal else ''}"
        out[name] = attention_kernel.ptx(*args, **constexprs)
    return out


def _tma_ready(x):
    """x itself when TMA can read it (head_dim contiguous, 16-byte aligned address and
    strides), else a contiguous copy (a documented cost)."""
    aligned = x.stride(3) == 1 and x.data_ptr() % 16 == 0 and \
        all(x.stride(i) % ALIGN_ELEMENTS == 0 or x.shape[i] == 1 for i in range(3))
    return x if aligned else x.contiguous()


def check_inputs(q, k, v, causal, softmax_scale, layout: str, config):
    """Validate flash_attention's arguments (torch tensors, or anything with the same shape,
    dtype, device, dim() and transpose()); returns q, k, v as (batch, seqlen, heads, head_dim)
    views and the config. Every mistake is a ValueError naming the argument, value and rule."""
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"flash_attention: layout is 'bshd' (batch, seqlen, heads, head_dim; "
                         f"FlashAttention's) or 'bhsd' (torch SDPA's), got {layout!r}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not hasattr(x, "dim") or x.dim() != 4:
            raise ValueError(f"flash_attention: {name} is a 4-D tensor ({layout}), got "
                             f"{type(x).__name__} of shape {tuple(getattr(x, 'shape', ()))}")
        if str(x.dtype) != "torch.bfloat16":
            raise ValueError(f"flash_attention: {name} is a bf16 tensor, got {x.dtype}")
    q, k, v = ((x.transpose(1, 2) if layout == "bhsd" else x) for x in (q, k, v))
    (batch, sq, hq, d), (bk, sk, hk, dk) = tuple(q.shape), tuple(k.shape)
    if tuple(v.shape) != tuple(k.shape) or bk != batch or dk != d:
        raise ValueError(f"flash_attention: k and v are (batch, seqlen_k, heads_kv, head_dim) "
                         f"with q's batch {batch} and head_dim {d} ({layout} order), got k "
                         f"{tuple(k.shape)} and v {tuple(v.shape)}")
    if d not in HEAD_DIMS:
        raise ValueError(f"flash_attention: head_dim = {d} is not supported; the kernel "
                         f"handles {', '.join(map(str, HEAD_DIMS))}")
    if hk == 0 or hq % hk:
        raise ValueError(f"flash_attention: heads_q = {hq} must be a multiple of heads_kv = "
                         f"{hk} (grouped-query attention shares each K/V head among "
                         "heads_q // heads_kv query heads)")
    if not isinstance(causal, bool):
        raise ValueError(f"flash_attention: causal is True or False, got {causal!r}")
    if softmax_scale is not None and (isinstance(softmax_scale, bool) or
                                      not isinstance(softmax_scale, (int, float)) or
                                      not math.isfinite(softmax_scale)):
        raise ValueError(f"flash_attention: softmax_scale is a finite float or None "
                         f"(1/sqrt(head_dim)), got {softmax_scale!r}")
    if softmax_scale is not None and softmax_scale < 0:
        raise ValueError(f"flash_attention: softmax_scale is >= 0 (the running row max is "
                         f"taken over unscaled scores), got {softmax_scale!r}")
    if config is not None and not isinstance(config, Config):
        raise ValueError(f"flash_attention: config is a Config, got {config!r}")
    cfg = config or default_config(d, causal, sk)
    if causal and BM % cfg.BN:
        raise ValueError(f"flash_attention: causal attention needs a key block BN dividing "
                         f"{BM} (the query tile), got config BN = {cfg.BN}")
    if cfg.smem_bytes(d) > SHARED_LIMIT:
        raise ValueError(f"flash_attention: config {cfg} needs {cfg.smem_bytes(d)} bytes of "
                         f"shared memory at head_dim {d}, over the {SHARED_LIMIT} available")
    if not q.is_cuda:
        raise ValueError(f"flash_attention: q is a CUDA tensor, got one on {q.device}")
    for name, x in (("k", k), ("v", v)):
        if x.device != q.device:
            raise ValueError(f"flash_attention: {name} is on q's device ({q.device}), got "
                             f"{x.device}")
    return q, k, v, cfg


def flash_attention(q, k, v, causal: bool = False, softmax_scale: float | None = None, *,
                    layout: str = "bshd", config: Config | None = None):
    """Forward attention on bf16 CUDA tensors: returns (o, lse). q is (batch, seqlen_q,
    heads_q, head_dim) and k, v (batch, seqlen_k, heads_kv, head_dim) for layout="bshd"; with
    layout="bhsd" every tensor (o too) is (batch, heads, seqlen, head_dim) as in torch SDPA.
    o is bf16 in q's layout, lse f32 (batch, heads_q, seqlen_q) in natural-log units;
    softmax_scale defaults to 1/sqrt(head_dim); causal is bottom-right aligned."""
    import torch
    qs, ks, vs, cfg = check_inputs(q, k, v, causal, softmax_scale, layout, config)
    (batch, sq, hq, d), sk = qs.shape, ks.shape[1]
    scale = d ** -0.5 if softmax_scale is None else float(softmax_scale)
    shape = (batch, hq, sq, d) if layout == "bhsd" else (batch, sq, hq, d)
    out = torch.empty(shape, device=q.device, dtype=torch.bfloat16)
    o = out.transpose(1, 2) if layout == "bhsd" else out
    lse = torch.empty(batch, hq, sq, device=q.device, dtype=torch.float32)
    if out.numel() == 0:
        return out, lse
    dead = max(sq - sk, 0) if causal else 0 if sk else sq      # rows that see no key
    if dead:
        o[:, :dead].zero_()
        lse[:, :, :dead] = float("-inf")
    if dead == sq:
        return out, lse
    qs, ks, vs = (_tma_ready(x) for x in (qs, ks, vs))
    o_run = _tma_ready(o)
    rows = lse.view(batch * hq, sq)
    grid, args, constexprs = kernel_arguments(
        (qs[:, dead:], ks, vs, o_run[:, dead:]),
        (qs[:, dead:], ks, vs, o_run[:, dead:], rows[:, dead:]), sq, causal, scale, cfg)
    attention_kernel[grid](*args, **constexprs)
    if o_run.data_ptr() != o.data_ptr():
        o.copy_(o_run)
    return out, lse


def reference(q, k, v, causal: bool, scale: float):
    """float64 numpy attention on (batch, seqlen, heads, head_dim) arrays: (o, lse); rows that
    see no key give o = 0, lse = -inf."""
    import numpy as np
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    sq, sk = q.shape[1], k.shape[1]
    if causal:
        visible = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq
        s = np.where(visible, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m_use = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_use)
    l = p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        o = np.einsum("bhqk,bkhd->bqhd", np.where(l > 0, p / l, 0.0), v)
        lse = np.where(l > 0, m_use + np.log(l), -np.inf)[..., 0]
    return o, lse


def _finite_error(got, want) -> float:
    """relative_to_max over finite entries; inf when the infinite entries differ."""
    import numpy as np
    inf = ~np.isfinite(want)
    if np.any(got[inf] != want[inf]) or np.any(~np.isfinite(got[~inf])):
        return float("inf")
    fin = want[~inf]
    return float(np.max(np.abs(got[~inf] - fin)) / max(np.max(np.abs(fin)), 1e-30)) \
        if fin.size else 0.0


CPU_CASES = ((1, 70, 150, 2, 1, 64, False), (1, 100, 200, 2, 2, 64, True),
             (1, 130, 40, 1, 1, 64, True))       # batch, sq, sk, hq, hk, d, causal


def check_cpu(seed: int = 0, cases=CPU_CASES, config: Config | None = None) -> float:
    """Run the kernel on the CPU interpreter (TMA, wgmma, mbarrier rings, roles, named barriers,
    with race checking) on small ragged problems (GQA, causal with seqlen_q < and > seqlen_k)
    against numpy in float64; returns the worst error relative to the largest |o| (or |lse|)
    (AssertionError past 2**-7)."""
    import numpy as np

    from layoutkit.dsl.interpreter import check_on_cpu, from_bf16, to_bf16
    rng = np.random.default_rng(seed)
    worst = 0.0
    for batch, sq, sk, hq, hk, d, causal in cases:
        cfg = config or default_config(d, causal, sk)
        q, k, v = (to_bf16(rng.standard_normal((batch, n, h, d)))
                   for n, h in ((sq, hq), (sk, hk), (sk, hk)))
        scale = d ** -0.5
        o_want, lse_want = reference(from_bf16(q), from_bf16(k), from_bf16(v), causal, scale)
        dead = max(sq - sk, 0) if causal else 0
        run = sq - dead
        qr = np.ascontiguousarray(q[:, dead:])
        o = np.zeros((batch, run, hq, d), np.uint16)
        lse = np.zeros((batch * hq, run), np.float32)
        views = tuple(_Shape(x.shape) for x in (qr, k, v, o))
        grid, args, constexprs = kernel_arguments(views, (qr, k, v, o, lse), run, causal,
                                                  scale, cfg)
        worst = max(worst, check_on_cpu(
            attention_kernel, grid, *args, **constexprs, error=_finite_error,
            expect={"o": o_want[:, dead:], "lse": lse_want[:, :, dead:].reshape(batch * hq, run)},
            tolerance=2 ** -7))
    return worst


def check(seed: int = 0) -> float:
    """Random bf16 problems (ragged, GQA, causal with seqlen_q <, = and > seqlen_k, seqlen_q 1,
    both layouts, every ablation config) on the GPU against torch in float64; returns the
    worst error of o relative to max |o_ref| (AssertionError past 2**-7, or an lse off by more
    than 2e-3 + 1e-5 |lse| where finite, or an infinity in the wrong place)."""
    import torch
    gen = torch.Generator(device="cuda").manual_seed(seed)
    cases = [(1, 1, 1, 1, 1, 64, False), (2, 300, 257, 4, 2, 64, False),
             (2, 257, 300, 4, 1, 128, True), (1, 1000, 600, 2, 2, 128, True),
             (1, 1, 1000, 8, 2, 128, True), (3, 129, 129, 2, 2, 64, True),
             (1, 512, 2048, 4, 4, 128, False)]
    worst = 0.0
    for i, (batch, sq, sk, hq, hk, d, causal) in enumerate(cases):
        q = torch.randn(batch, sq, hq, d, device="cuda", generator=gen).to(torch.bfloat16)
        k = torch.randn(batch, sk, hk, d, device="cuda", generator=gen).to(torch.bfloat16)
        v = torch.randn(batch, sk, hk, d, device="cuda", generator=gen).to(torch.bfloat16)
        configs = list(ablations(d, causal).values())
        cfg = configs[i % len(configs)]
        o, lse = flash_attention(q, k, v, causal=causal, config=cfg)
        o_ref, lse_ref = reference_torch(q, k, v, causal, d ** -0.5)
        worst = max(worst, compare(o, lse, o_ref, lse_ref, f"case {i} {cfg}"))
    return worst


def reference_torch(q, k, v, causal: bool, scale: float):
    """float64 torch attention on (batch, seqlen, heads, head_dim) tensors: (o, lse (batch,
    heads, seqlen_q)); rows that see no key give o = 0, lse = -inf."""
    import torch
    q, k, v = (x.double().transpose(1, 2) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-1, -2)) * scale
    sq, sk = q.shape[2], k.shape[2]
    if causal:
        rows = torch.arange(sq, device=q.device)[:, None]
        visible = torch.arange(sk, device=q.device)[None, :] <= rows + sk - sq
        s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.clamp_min(-1e300)[..., None]).nan_to_num(0.0)
    return (p @ v).transpose(1, 2), lse


def compare(o, lse, o_ref, lse_ref, what: str) -> float:
    """Error of o relative to max |o_ref|; asserts it (2**-7) and lse (2e-3 + 1e-5 |lse| where
    finite, the same infinities)."""
    import torch
    assert not o.isnan().any(), f"{what}: NaN in o (an element not written?)"
    err = ((o.double() - o_ref).abs().max() / o_ref.abs().max().clamp_min(1e-30)).item()
    assert err < 2 ** -7, f"{what}: o off by {err:.3g} of max |o|"
    finite = torch.isfinite(lse_ref)
    assert torch.equal(torch.isfinite(lse), finite), f"{what}: lse infinities misplaced"
    assert (lse[~finite] == lse_ref[~finite]).all(), f"{what}: lse infinities differ"
    if finite.any():      # f32 scores: the error grows with the logits' magnitude
        off = (lse.double()[finite] - lse_ref[finite]).abs() - 1e-5 * lse_ref[finite].abs()
        assert off.max().item() < 2e-3, f"{what}: lse off by {off.max().item():.3g} + 1e-5|lse|"
    return err


def attention_flops(batch: int, heads: int, sq: int, sk: int, d: int, causal: bool) -> float:
    """4 * batch * heads * sq * sk * d, halved for causal (FlashAttention's convention)."""
    return 4.0 * batch * heads * sq * sk * d / (2 if causal else 1)


def benchmark(reps: int = 20) -> list[dict]:
    """TFLOP/s of flash_attention against torch SDPA's best backend (benchmarks/
    bench_attention.py has the full table and the ablation rows)."""
    import torch

    from layoutkit.benchmarking import interleaved, tflops
    rows = []
    for d in HEAD_DIMS:
        for causal in (False, True):
            batch, heads, s = 4, 2048 // d, 4096         # 16k tokens x 2048 channels
            q, k, v = (torch.randn(batch, s, heads, d, device="cuda").to(torch.bfloat16)
                       for _ in range(3))
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            sdpa = torch.nn.functional.scaled_dot_product_attention
            times = interleaved({"layoutkit": lambda: flash_attention(q, k, v, causal),
                                 "sdpa": lambda: sdpa(qt, kt, vt, is_causal=causal)}, reps=reps)
            flops = attention_flops(batch, heads, s, s, d, causal)
            ours, theirs = (tflops(flops, times[x].median_ms) for x in ("layoutkit", "sdpa"))
            rows.append({"case": f"d{d} s{s} {'causal' if causal else 'full'}",
                         "layoutkit_tflops": ours, "sdpa_tflops": theirs,
                         "speedup": ours / theirs})
            print(f"d={d} seqlen={s} causal={causal}: layoutkit {ours:.1f}, SDPA {theirs:.1f} "
                  f"TFLOP/s ({ours / theirs:.3f}x)")
    return rows
