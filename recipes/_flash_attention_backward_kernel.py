"""The kernel of recipes/flash_attention_backward.py (FlashAttention's backward for Hopper: dQ,
dK, dV of O = softmax(Q K^T * scale) V given dO, O's log-sum-exp and D = rowsum(dO * O)), its
pipeline and numerics. The host side (configs, the pre- and post-pass, the entry point,
references, checks) is the recipe file.

One CTA per (BN-key block, kv head, batch); 3 warpgroups (every line below is in the kernel):

    warpgroup 0, producer: one elected thread loads the K and V tiles once (k_full, v_full),
        then per ring step i (query head g of the group, BQ-row query block m): wait q_empty[s]
        -> expect_tx(q_full[s]) { TMA Q_m, TMA its BQ neg_lse2 }; wait do_empty[s] ->
        expect_tx(do_full[s]) { TMA dO_m, TMA its BQ D } (the rows' values read from shared
        memory where they are used, not from L2 in the critical path)
    warpgroups 1, 2, consumers: warpgroup w owns keys w*64 .. w*64+63 of the block, and keeps
        dK, dV of them (64 x head_dim f32 each) in registers over every step:
            S^T  = K_w Q_m^T         (SS wgmma: rows keys, columns queries)
            dP^T = V_w dO_m^T        (SS wgmma)
            P^T  = exp2(S^T * c + neg_lse2)   (c = scale log2 e, neg_lse2 = -lse log2 e: the
                                      forward's P, one fma per score)
            dV  += P^T dO_m          (RS wgmma: P^T from registers, dO MN-major from shared)
            dS^T = P^T * (dP^T - D)
            dK  += dS^T Q_m          (RS wgmma)
            dS^T -> shared (sdS, 2 buffers); fence.proxy.async; named barrier
            dQ_part = dS K           (SS wgmma, dS MN-major from sdS, K MN-major)
            red.global.add dQ_part -> the f32 dQ accumulator (lk.atomic_add)
        epilogue: dK *= scale; dK, dV -> bf16 -> shared (the K and V tiles, free then) ->
        fence.proxy.async -> TMA store of the warpgroup's 64 rows (clipped at seqlen_k)

Numerics: the scores' scale is applied once, at the end (dK *= scale here, dQ *= scale in the
post-pass): dS above is the gradient with respect to the scaled scores. P is recomputed from
the forward's lse (natural log, scaled into log2 units by the pre-pass), so it is the forward's
P up to f32 rounding. Rows that see no key (causal, seqlen_q > seqlen_k) have lse = -inf
(neg_lse2 = +inf); they lie only in masked blocks, where the mask picks 0 after the exp2.
Query rows past seqlen_q (the last, ragged block: TMA fills Q and dO with zeros) read the pre-
pass's padding neg_lse2 = -inf, D = 0, so P = 0 there without a mask; key rows past seqlen_k have
K = V = 0, so they add nothing to dQ and their dK, dV rows are clipped by the TMA store. The
exponent is clamped at 0 (P <= 1, as it is in exact arithmetic): a zero key row's P = exp(-lse)
would overflow for lse < -88 and make 0 * inf = NaN in dQ; the clamp also keeps the no-key
rows' exp2 finite before their mask.

Causal (bottom-right aligned, as the forward): query q sees key j <= q + seqlen_k - seqlen_q;
query blocks wholly above the CTA's first key are skipped, the ones that cross its keys'
diagonal are masked (the first of each head's blocks), the rest run unmasked (`query_blocks`).
GQA: the CTA walks the GROUP query heads of its kv head one after the other through the same
ring, so dK and dV are summed over the group in registers and stored once.

Pipeline switches (constexprs, `Config` in the recipe file): BN keys per CTA (2 x 64), BQ the
query rows per ring step (64, or 128 with DQ_SPLIT "rows": S^T and dP^T are then 64 keys x 128
queries per warpgroup), STAGES the Q/dO ring depth, DQ_SPLIT how the two consumer warpgroups
share dQ = dS K: "head_dim" (each computes dQ for half of head_dim over all BN keys: one
reduction per dQ element per CTA, needs head_dim / 2 a multiple of 64 and a 256-thread barrier
per step) or "rows" (each computes its 64 of the 128 query rows over all BN keys, the same
barrier) or "keys" (each computes the full head_dim over its own 64 keys: no cross-warpgroup
barrier, twice the reductions) or
"keys_summed" (as "keys", then the two partials summed through shared memory behind a 256-
thread barrier, each warpgroup reducing half of the columns: one reduction per element), DQ_WRITE
who issues the dQ reductions: "consumers" (each warpgroup its own, as above) or
"producer_warps" (the consumers hand dQ over through shared memory to warps 1-3 of the producer
warpgroup, which reduce it) or "tma_reduce" (each consumer's tile through shared memory to a
TMA reduce-add issued by a lane of warp 1; both: recipes/_flash_attention_backward_dq_writer.py),
DS_STORE how each step's dS^T reaches sdS ("st": 4-byte st.shared per value pair, 16 per
thread; "stmatrix": 4 stmatrix.x4 per thread), DQ_FIRST whether dQ = dS K is issued before
dK's wgmma (its reduction or hand-off then runs while dK computes) or after it (both retired
first), DS_FIRST whether dS is computed before dV's wgmma is issued (P^T and dP^T die before
the bf16 P^T that wgmma reads from registers lives: 64 fewer live registers at BQ 128) or while
it runs, LONGEST_FIRST the grid's order (key_block_ids), and the register budgets; DKV_SPLIT
"head_dim" (head dim 256) replaces this file's consumers by
recipes/_flash_attention_backward_columns.py's (64 keys per CTA, head_dim split for dK, dV).
"""
from __future__ import annotations

import functools
import math

import layoutkit as lk
from recipes import _flash_attention_backward_dq_writer as dq_writer
from recipes._flash_attention_kernel import Env, _where, release, row_col, tile_layout

WG_KEYS = 64                   # keys of one consumer warpgroup (one m64 wgmma)
CONSUMERS = dq_writer.CONSUMERS  # consumer warpgroups
BN = CONSUMERS * WG_KEYS       # keys per CTA
BQ = 64                        # query rows per ring step by default (the BQ constexpr)
QUERY_BLOCKS = (64, 128)       # the BQ the kernel takes: 128 with DQ_SPLIT "rows" only
WG_QUERIES = 64                # dQ rows of one consumer warpgroup in the "rows" split (m64)
LOG2E = math.log2(math.e)
DS_BARRIER, EPILOGUE_BARRIER = 1, 3      # named barrier ids (keys split, epilogue: + warpgroup)
DQ_SPLITS = ("head_dim", "keys", "keys_summed", "rows")
SHARED_DS = ("head_dim", "rows")         # splits whose dQ reads both warpgroups' dS and K rows
DQ_WRITES = ("consumers", "producer_warps", "tma_reduce")   # who reduces dQ into the accumulator
DS_STORES = ("st", "stmatrix")                  # how dS^T goes to shared memory
DQ_BARRIER = 5                           # the keys_summed exchange (256 threads)


def query_blocks(sq, sk, n_blk, causal: bool, keys: int = BN, bq: int = BQ):
    """(m_begin, n_masked, nq, nqb) of key block n_blk (`keys` keys), kernel integers: the CTA
    runs query blocks (of `bq` rows) m_begin + j, j = 0 .. nq-1, of each head of its group, the
    first n_masked of them masked; nqb = ceil(sq / bq) blocks in all. Causal: query q sees key
    j iff j <= q + sk - sq; block m is skipped when its last row sees no key of the CTA (m*bq +
    bq-1 < n_blk*keys - (sk - sq)) and runs unmasked when its first row sees the CTA's last key.
    Every key block has a query block (the last query row sees every key); the clamps make the
    counts provably >= 0."""
    nqb = -(-sq // bq)
    if not causal:
        return 0, 0, nqb, nqb
    m_begin = lk.maximum(n_blk * keys + sq - sk, 0) // bq   # the first row that sees the block
    nq = lk.maximum(nqb - m_begin, 0)
    last_key_row = lk.maximum(n_blk * keys + keys - 1 + sq - sk, 0)
    n_masked = lk.minimum(lk.maximum(-(-last_key_row // bq) - m_begin, 0), nq)
    return m_begin, n_masked, nq, nqb


def key_block_ids(heads_kv, section: int) -> tuple:
    """(key block, kv head, batch) of this CTA: the grid's (x, y, z), or with `section` > 0
    (longest first) the grid (section, key blocks, pairs / section) over the (kv head, batch)
    pairs p = z * section + x: key block y, kv head p % heads_kv, batch p // heads_kv. Causal
    key block n sees the query blocks from about n * BN / BQ on, so n = 0 holds the most work,
    and the hardware starts CTAs in block-index order with x fastest: each section of pairs
    starts its longest CTAs first and fills its last wave with the shortest (along x, the last
    heads' longest came last), while the CTAs in flight share a few pairs' Q, dO and dQ in L2
    (longest_first_section)."""
    if section:
        pair = lk.block_id(2) * section + lk.block_id(0)
        return lk.block_id(1), pair % heads_kv, pair // heads_kv
    return lk.block_id(0), lk.block_id(1), lk.block_id(2)


LONGEST_FIRST_PAIRS = 8   # (kv head, batch) pairs per longest-first section, at most
LONGEST_FIRST_SHARE = 4   # longest first where the longest CTA is over 1/4 of an SM's share


def longest_first_section(pairs: int) -> int:
    """The (kv head, batch) pairs of one longest-first section: the largest divisor of `pairs`
    up to LONGEST_FIRST_PAIRS (so every section is whole). CTAs in flight then share a few
    pairs' Q, dO and dQ in L2; all pairs in one section measured 0.62-0.73x at 2k with 128
    pairs (docs/PERFORMANCE.md, "Causal backward grid order")."""
    return max(d for d in range(1, min(pairs, LONGEST_FIRST_PAIRS) + 1) if pairs % d == 0)


@functools.cache
def longest_first_pays(sq: int, sk: int, keys: int, bq: int, pairs: int, group: int,
                       sms: int) -> bool:
    """Whether a causal grid runs longest first (key_block_ids): when its longest CTA (key block
    0: group x its query blocks, + 2 steps for K, V and the epilogue) takes more than
    1/LONGEST_FIRST_SHARE of the ideal makespan (every CTA's steps over `sms` SMs), where
    starting it in the last wave costs most. Causal GQA at 8k (longest CTA 0.5 of the share):
    1.20x in sections, 0.97-1.03x elsewhere, 0.94x at 16k (0.13 of the share), so block order
    (the CTAs in flight share one head's Q, dO and dQ in L2) is kept there
    (docs/PERFORMANCE.md, "Causal backward grid order")."""
    nqb = -(-sq // bq)
    steps = [max(nqb - max(n * keys + sq - sk, 0) // bq, 0) for n in range(-(-sk // keys))]
    share = pairs * sum(group * n + 2 for n in steps) / sms
    return (group * max(steps, default=0) + 2) * LONGEST_FIRST_SHARE > share


def backward_body(q: lk.Tensor[lk.bf16, 4], k: lk.Tensor[lk.bf16, 4], v: lk.Tensor[lk.bf16, 4],
                  do: lk.Tensor[lk.bf16, 4], dk: lk.Tensor[lk.bf16, 4],
                  dv: lk.Tensor[lk.bf16, 4], dq_acc: lk.Tensor[lk.f32, 2],
                  neg_lse2: lk.Tensor[lk.f32, 1], delta: lk.Tensor[lk.f32, 1], GROUP: lk.i32,
                  SCALE: lk.f32, SCALE_LOG2: lk.f32, D: lk.constexpr, STAGES: lk.constexpr,
                  CAUSAL: lk.constexpr, DQ_SPLIT: lk.constexpr, DKV_SPLIT: lk.constexpr,
                  DQ_WRITE: lk.constexpr, DS_STORE: lk.constexpr, DQ_FIRST: lk.constexpr,
                  PRODUCER_REGISTERS: lk.constexpr, CONSUMER_REGISTERS: lk.constexpr,
                  BQ: lk.constexpr = BQ, DS_FIRST: lk.constexpr = False,
                  LONGEST_FIRST: lk.constexpr = 0):
    """The kernel (module docstring). q, do (batch, seqlen_q, heads_q, D); k, v, dk, dv (batch,
    seqlen_k, heads_kv, D), D contiguous; dq_acc f32 (batch * heads_q * nqb * BQ, D), row
    (b * heads_q + h) * nqb * BQ + q, nqb = ceil(seqlen_q / BQ) (BQ query rows per step),
    added into (zeroed by the host); neg_lse2, delta f32 (batch * heads_q * nqb * BQ,) in the
    same row order: -lse * log2 e and rowsum(dO * O), padded with -inf and 0. Query head h reads
    kv head h // GROUP. Grid (ceil(seqlen_k / KEYS), heads_kv, batch), KEYS = 128 (DKV_SPLIT
    "keys") or 64 ("head_dim": recipes/_flash_attention_backward_columns.py's consumers);
    LONGEST_FIRST > 0: grid (LONGEST_FIRST, key blocks, heads_kv * batch / LONGEST_FIRST)
    instead, sections of that many (kv head, batch) pairs (key_block_ids)."""
    Q, K, V, DO, DK, DV = (x.permute(1, 3, 2, 0) for x in (q, k, v, do, dk, dv))
    SQ, SK, HQ = q.shape[1], k.shape[1], q.shape[2]
    n_blk, hk, b = key_block_ids(k.shape[2], LONGEST_FIRST)
    KEYS = BN if DKV_SPLIT == "keys" else WG_KEYS
    m_begin, n_masked, nq, nqb = query_blocks(SQ, SK, n_blk, CAUSAL, KEYS, BQ)
    buffers = shared_buffers(D, STAGES, KEYS, DKV_SPLIT, DQ_SPLIT, DQ_WRITE, BQ)

    def query_row(h, m):
        """Block row of query block m of head h in dq_acc, neg_lse2 and delta (BQ-row units)."""
        return (b * HQ + h) * nqb + m
    roles(Env(**buffers, **locals()), consumer_kind(DKV_SPLIT))


def consumer_kind(split: str) -> type:
    """The consumer class of DKV_SPLIT `split`."""
    if split == "head_dim":
        from recipes._flash_attention_backward_columns import ColumnConsumer
        return ColumnConsumer
    return Consumer


def roles(e: Env, kind: type, live=None) -> None:
    """The producer warp and the consumer warpgroups (of class `kind`) on the kernel's tensors,
    buffers and block indices `e`, each doing its work only where `live` holds (None: always).
    e.query_row(h, m) is query block m of head h's 64-row block in dq_acc, neg_lse2, delta."""
    with lk.sm90.warp_role("producer", warpgroups=(0,), registers=e.PRODUCER_REGISTERS):
        with _where(live), lk.if_(lk.eq(lk.warp_id(), 0)):
            produce(e)
        if e.DQ_WRITE == "producer_warps":
            with _where(live), lk.if_(lk.ne(lk.warp_id(), 0)):
                dq_writer.write_dq(e)
        elif e.DQ_WRITE == "tma_reduce":
            with _where(live), lk.if_(lk.eq(lk.warp_id(), dq_writer.TMA_WARP)):
                dq_writer.write_dq_tma(e)
    for wg in range(CONSUMERS):
        with lk.sm90.warp_role(f"consumer{wg}", warpgroups=(1 + wg,),
                               registers=e.CONSUMER_REGISTERS):
            with _where(live):
                kind(wg, e).run()


def dq_halves_layout(D: int) -> lk.Layout:
    """(64 queries, D/2 columns, warpgroup, buffer) f32 for the keys_summed exchange; rows 8
    floats apart past D/2 so a half-warp's 8-byte accesses of an accumulator fragment hit 32
    distinct banks."""
    pitch = D // 2 + 8
    return lk.Layout((BQ, D // 2, CONSUMERS, 2), (pitch, 1, BQ * pitch, CONSUMERS * BQ * pitch))


def shared_buffers(D: int, STAGES: int, keys: int = BN, split: str = "keys",
                   dq_split: str = "keys", dq_write: str = "consumers", BQ: int = BQ) -> dict:
    """K and V (`keys` rows, loaded once, reused for dK and dV), the Q and dO rings with their
    steps' neg_lse2 and D rows, the two dS^T buffers (and P^T's, DKV_SPLIT "head_dim") and the
    mbarriers, initialised: {name: tensor or barrier array}."""
    sK = lk.shared_tensor(tile_layout(keys, D), lk.bf16, name="sK")
    sV = lk.shared_tensor(tile_layout(keys, D), lk.bf16, name="sV")
    sQ = lk.shared_tensor(tile_layout(BQ, D, STAGES), lk.bf16, name="sQ")
    sdO = lk.shared_tensor(tile_layout(BQ, D, STAGES), lk.bf16, name="sdO")
    sdS = lk.shared_tensor(tile_layout(keys, BQ, 2), lk.bf16, name="sdS")
    sP = lk.shared_tensor(tile_layout(keys, BQ, 2), lk.bf16, name="sP") \
        if split == "head_dim" else None
    sdQ = lk.shared_tensor(dq_halves_layout(D), lk.f32, name="sdQ") if dq_split == \
        "keys_summed" else None
    if dq_write == "producer_warps":
        sdQ = lk.shared_tensor(dq_writer.sdq_layout(D, dq_split), lk.f32, name="sdQ")
    elif dq_write == "tma_reduce":
        sdQ = lk.shared_tensor(dq_writer.tma_sdq_layout(D, dq_split), lk.f32, name="sdQ")
    rows = lk.Layout((BQ, STAGES), (1, BQ))             # a step's BQ values of neg_lse2 / D
    sLSE = lk.shared_tensor(rows, lk.f32, name="sLSE", align=128)      # TMA boxes
    sDelta = lk.shared_tensor(rows, lk.f32, name="sDelta", align=128)
    k_full = lk.sm90.mbarrier_array(1, 1, name="k_full")
    v_full = lk.sm90.mbarrier_array(1, 1, name="v_full")
    q_full = lk.sm90.mbarrier_array(STAGES, 1, name="q_full")
    do_full = lk.sm90.mbarrier_array(STAGES, 1, name="do_full")
    q_empty = lk.sm90.mbarrier_array(STAGES, CONSUMERS * 4, name="q_empty")
    do_empty = lk.sm90.mbarrier_array(STAGES, CONSUMERS * 4, name="do_empty")
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.mbarrier_init(k_full, v_full, q_full, do_full, q_empty, do_empty)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    return dict(sK=sK, sV=sV, sQ=sQ, sdO=sdO, sdS=sdS, sP=sP, sdQ=sdQ, sLSE=sLSE, sDelta=sDelta,
                k_full=k_full, v_full=v_full, q_full=q_full, do_full=do_full,
                q_empty=q_empty, do_empty=do_empty)


def produce(e: Env) -> None:
    """The producer warp: K and V once, then Q_m with its neg_lse2 rows and dO_m with its D
    rows for every (head, query block) step."""
    for name, tensor, bar in (("sK", e.K, e.k_full), ("sV", e.V, e.v_full)):
        with lk.sm90.elect_one(), lk.sm90.expect_tx(bar[0]):
            lk.sm90.tma_load(getattr(e, name),
                             tensor.tile((e.KEYS, e.D, 1, 1), (e.n_blk, 0, e.hk, e.b)),
                             bar[0])
    for g in lk.range(0, e.GROUP):
        h = e.hk * e.GROUP + g
        for j in lk.range(0, e.nq):
            m = e.m_begin + j
            p = lk.sm90.producer_state(g * e.nq + j, e.STAGES)
            row = e.query_row(h, m)
            for ring, empty, full, tensor, sv, values in (
                    (e.sQ, e.q_empty, e.q_full, e.Q, e.sLSE, e.neg_lse2),
                    (e.sdO, e.do_empty, e.do_full, e.DO, e.sDelta, e.delta)):
                lk.sm90.mbarrier_wait(empty[p.stage], p.phase)
                with lk.sm90.elect_one(), lk.sm90.expect_tx(full[p.stage]):
                    lk.sm90.tma_load(ring[:, :, :, :, p.stage],
                                     tensor.tile((e.BQ, e.D, 1, 1), (m, 0, h, e.b)),
                                     full[p.stage])
                    lk.sm90.tma_load(sv[:, p.stage], values.tile((e.BQ,), (row,)),
                                     full[p.stage])


class Consumer:
    """Consumer warpgroup `wg`: its keys' dK and dV through every step, its share of dQ."""

    def __init__(self, wg: int, e: Env):
        self.wg, self.e = wg, e
        D = e.D
        self.sK_w, self.sV_w = (self.own_keys(x) for x in (e.sK, e.sV))
        self.s_layout = lk.sm90.wgmma_accumulator_layout(e.BQ)
        self.kv_layout = lk.sm90.wgmma_accumulator_layout(D)
        self.dq_cols = dq_writer.tile_columns(D, e.DQ_SPLIT)
        self.dq_layout = lk.sm90.wgmma_accumulator_layout(self.dq_cols)
        self.row0, self.col0, self.drow, self.dcol = row_col(self.s_layout,
                                                             lk.sm90.thread_id_in_warpgroup())
        self.first_key = self.first_own_key() + self.row0
        # a step's neg_lse2 and D rows in shared memory as (keys, queries) views, the key mode
        # broadcast; the dQ accumulator unmasked: its rows are padded to whole 64-query blocks
        by_query = lk.Layout((WG_KEYS, e.BQ, e.STAGES), (0, 1, e.BQ))
        self.by_query = {"neg_lse2": e.sLSE.view(by_query), "delta": e.sDelta.view(by_query)}
        self.dq_acc = lk.global_tensor(e.dq_acc.ptr, e.dq_acc.layout, None)

    def own_keys(self, x):
        """This warpgroup's 64 rows of the K or V tile x."""
        return x[:, :, 0, 0].tile((WG_KEYS, self.e.D), (self.wg, 0))

    def first_own_key(self):
        return self.e.n_blk * BN + self.wg * WG_KEYS

    def run(self) -> None:
        e = self.e
        lk.sm90.mbarrier_wait(e.k_full[0], 0)
        lk.sm90.mbarrier_wait(e.v_full[0], 0)
        zero = lk.full(self.kv_layout, 0.0)
        heads = lk.range(0, e.GROUP, carry=(zero, zero))
        for g, (dK, dV) in heads:
            h = e.hk * e.GROUP + g
            for masked, start, stop in self.spans():
                loop = lk.range(start, stop, carry=(dK, dV))
                for j, (dK_m, dV_m) in loop:
                    loop.next(*self.step(g * e.nq + j, h, e.m_begin + j, dK_m, dV_m, masked))
                dK, dV = loop.results
            heads.next(dK, dV)
        dK, dV = heads.results
        self.epilogue(dK * e.SCALE, dV)

    def spans(self) -> tuple:
        """(masked, first, stop) runs of the ring steps j of one head: causal, the first
        n_masked steps masked."""
        e = self.e
        return ((True, 0, e.n_masked), (False, e.n_masked, e.nq)) if e.CAUSAL else \
            ((False, 0, e.nq),)

    def mask(self, P, m):
        """P^T with 0 where key > query + seqlen_k - seqlen_q (after the exp2: rows that see no
        key have neg_lse2 = +inf, clamped to P = 1 there)."""
        e = self.e
        base = lk.cast(m * e.BQ + self.col0 + e.SK - e.SQ - self.first_key, lk.i32)
        keep = lk.RegisterTensor(lk.bool_, P.layout, [(base >= dr - dc).value
                                                      for dr, dc in zip(self.drow, self.dcol)])
        return lk.where(keep, P, 0.0)

    def query_values(self, name: str, stage):
        """This thread's neg_lse2 or D values of ring stage `stage`, in the S^T layout (after
        that stage's full barrier)."""
        return lk.load(self.by_query[name][:, :, stage].partition(self.s_layout))

    def step(self, i, h, m, dK, dV, masked: bool):
        """Ring step i: query block m of head h; returns the new (dK, dV)."""
        e = self.e
        s = lk.sm90.consumer_state(i, e.STAGES)
        sQ, sdO = e.sQ[:, :, 0, 0, s.stage], e.sdO[:, :, 0, 0, s.stage]
        lk.sm90.mbarrier_wait(e.q_full[s.stage], s.phase)
        lk.sm90.wgmma_fence()
        S = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(e.BQ), self.sK_w, sQ, accumulate=False)
        lk.sm90.wgmma_commit()
        lk.sm90.mbarrier_wait(e.do_full[s.stage], s.phase)
        lk.sm90.wgmma_fence()
        dP = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(e.BQ), self.sV_w, sdO, accumulate=False)
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(1)                               # S^T done, dP^T still running
        neg_lse2 = self.query_values("neg_lse2", s.stage)   # shared: loaded where used
        P = lk.exp2(lk.minimum(lk.fma(S, e.SCALE_LOG2, neg_lse2), 0.0), ftz=True)   # P <= 1
        if masked:
            P = self.mask(P, m)
        if e.DS_FIRST:                      # dS before dV's wgmma: P, dP die before P16 lives
            lk.sm90.wgmma_wait(0)                           # dP^T done
            dS16 = lk.cast(P * (dP - self.query_values("delta", s.stage)), lk.bf16)
            P16 = lk.cast(P, lk.bf16)
            lk.sm90.wgmma_fence()
            dV = lk.sm90.wgmma(dV, P16, sdO.T, accumulate=True)
            lk.sm90.wgmma_commit()
        else:                               # dS computed while dV's wgmma runs
            P16 = lk.cast(P, lk.bf16)
            lk.sm90.wgmma_fence()
            dV = lk.sm90.wgmma(dV, P16, sdO.T, accumulate=True)
            lk.sm90.wgmma_commit()
            lk.sm90.wgmma_wait(1)                           # dP^T done, dV still running
            dS16 = lk.cast(P * (dP - self.query_values("delta", s.stage)), lk.bf16)
        a, b = self.share_ds(i, dS16)       # before dK's wgmma, which owns dS16 until retired
        if e.DQ_FIRST:                      # dQ's reduction or hand-off under dK's wgmma
            dQ = self.issue_dq(a, b)
            lk.sm90.wgmma_fence()
            dK = lk.sm90.wgmma(dK, dS16, sQ.T, accumulate=True)
            lk.sm90.wgmma_commit()
            lk.sm90.wgmma_wait(1)                           # dQ done, dK still running
            self.reduce_dq(i, h, m, dQ)
            lk.sm90.wgmma_wait(0)
        else:
            lk.sm90.wgmma_fence()
            dK = lk.sm90.wgmma(dK, dS16, sQ.T, accumulate=True)
            lk.sm90.wgmma_commit()
            dQ = self.issue_dq(a, b)
            lk.sm90.wgmma_wait(0)
        release(e.q_empty, s.stage)
        release(e.do_empty, s.stage)
        if not e.DQ_FIRST:
            self.reduce_dq(i, h, m, dQ)
        return dK, dV

    def issue_dq(self, a, b):
        """dQ = dS K from the shared operands of share_ds (one committed wgmma group)."""
        lk.sm90.wgmma_fence()                   # ptxas wants one before the fresh dQ accumulator
        dQ = lk.sm90.wgmma_accumulator(self.dq_cols)
        for part, (a_keys, b_keys) in enumerate(zip(a, b)):    # 64 keys each: fewer live
            dQ = lk.sm90.wgmma(dQ, a_keys, b_keys, accumulate=part > 0)   # descriptors
        lk.sm90.wgmma_commit()
        return dQ

    def reduce_dq(self, i, h, m, dQ) -> None:
        """Step i's dQ part (query block m of head h) into the f32 accumulator: by this
        warpgroup's reductions, or handed to the producer warps (DQ_WRITE)."""
        e = self.e
        if e.DQ_WRITE == "producer_warps":
            col = self.wg if e.DQ_SPLIT == "head_dim" else 0
            dq_writer.consumer_hand_off(e, dQ, self.wg if e.DQ_SPLIT == "keys" else 0, col)
            return
        if e.DQ_WRITE == "tma_reduce":
            dq_writer.consumer_hand_off_tma(e, dQ, self.wg)
            return
        if e.DQ_SPLIT == "keys_summed":
            dQ = self.sum_halves(i, dQ)
        at = dq_writer.tile_at(e.DQ_SPLIT, e.query_row(h, m), self.wg)
        lk.atomic_add(self.dq_acc.tile(dQ.layout.tile, at).partition(dQ.layout), dQ)

    def sum_halves(self, i, dQ):
        """DQ_SPLIT "keys_summed": the two warpgroups' dQ over their own keys summed before the
        reductions, through shared memory (buffer i % 2): warpgroup w keeps columns w*D/2 ..
        of both, so each dQ element takes one reduction per CTA, as with the head_dim split.
        Returns this warpgroup's half (an accumulator of D/2 columns)."""
        e, wg = self.e, self.wg
        half_layout = lk.sm90.wgmma_accumulator_layout(e.D // 2)
        n = len(dQ.values) // 2          # value v's column is 8 (v // 4) + ...: halves split
        halves = [lk.RegisterTensor(lk.f32, half_layout, dQ.values[k * n:(k + 1) * n])
                  for k in range(2)]
        buf = lk.sm90.consumer_state(i, 2).stage
        lk.store(e.sdQ[:, :, wg, buf].partition(half_layout), halves[1 - wg])   # the other's
        lk.sm90.named_barrier_sync(DQ_BARRIER, CONSUMERS * 128)
        return halves[wg] + lk.load(e.sdQ[:, :, 1 - wg, buf].partition(half_layout))

    def share_ds(self, i, dS16):
        """dS^T to its shared buffer, visible to the async proxy and (DQ_SPLIT) to the other
        warpgroup; returns the A and B shared operands of this warpgroup's dQ = dS K, one of
        each per 64 keys (one wgmma each: 4 + 4 k-step descriptors live, not 8 + 8)."""
        e, wg = self.e, self.wg
        buf = e.sdS[:, :, 0, 0, lk.sm90.consumer_state(i, 2).stage]
        store = lk.sm90.stmatrix if e.DS_STORE == "stmatrix" else lk.store
        store(buf.tile((WG_KEYS, e.BQ), (wg, 0)).partition(self.s_layout), dS16)
        lk.sm90.fence_proxy_async()                     # generic stores, then wgmma reads
        keys = range(CONSUMERS)                         # dS K over the BN keys, 64 at a time
        if e.DQ_SPLIT == "head_dim":
            lk.sm90.named_barrier_sync(DS_BARRIER, CONSUMERS * 128)
            return ([buf.tile((WG_KEYS, e.BQ), (j, 0)).T for j in keys],     # (queries, 64 keys)
                    [e.sK[:, :, 0, 0].tile((WG_KEYS, self.dq_cols), (j, wg)).T
                     for j in keys])                                         # (D/2, 64 keys)
        if e.DQ_SPLIT == "rows":                        # this warpgroup's 64 queries, all keys
            lk.sm90.named_barrier_sync(DS_BARRIER, CONSUMERS * 128)
            return ([buf.tile((WG_KEYS, WG_QUERIES), (j, wg)).T for j in keys],  # (64 q, 64 keys)
                    [e.sK[:, :, 0, 0].tile((WG_KEYS, e.D), (j, 0)).T for j in keys])  # (D, 64)
        lk.sm90.named_barrier_sync(DS_BARRIER + wg, 128)
        return [buf.tile((WG_KEYS, e.BQ), (wg, 0)).T], [self.sK_w.T]   # (queries, 64), (D, 64)

    def epilogue(self, dK, dV) -> None:
        """dK and dV of this warpgroup's keys through its rows of sK and sV to global memory."""
        e, wg = self.e, self.wg
        shared = e.DQ_SPLIT in SHARED_DS         # both warpgroups read every key's rows of sK
        lk.sm90.named_barrier_sync(DS_BARRIER + (0 if shared else wg),
                                   CONSUMERS * 128 if shared else 128)
        lk.store(self.sK_w.partition(self.kv_layout), lk.cast(dK, lk.bf16))
        lk.store(self.sV_w.partition(self.kv_layout), lk.cast(dV, lk.bf16))
        lk.sm90.fence_proxy_async()
        lk.sm90.named_barrier_sync(EPILOGUE_BARRIER + wg, 128)
        self.store_dkv((WG_KEYS, e.D, 1, 1), (e.n_blk * CONSUMERS + wg, 0, e.hk, e.b),
                       (wg, 0, 0, 0))

    def store_dkv(self, box: tuple, out_at: tuple, buf_at: tuple) -> None:
        """The `box` tiles of sK and sV at buf_at (this warpgroup's dK and dV, written and
        fenced by its threads) to the tiles of DK and DV at out_at: one TMA store each."""
        e = self.e
        with lk.if_(lk.eq(lk.sm90.thread_id_in_warpgroup(), 0)):
            for out, buf in ((e.DK, e.sK), (e.DV, e.sV)):
                lk.sm90.tma_store(out.tile(box, out_at), buf.tile(box, buf_at))
            lk.sm90.tma_store_commit()
            lk.sm90.tma_store_wait(0)


WARPS = 4 * (1 + CONSUMERS)
backward_kernel = lk.kernel(backward_body, num_warps=WARPS)
