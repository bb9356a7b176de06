"""The kernels of recipes/flash_attention_kvcache.py: decode attention over a (paged) KV cache,
split over key ranges, and the combine of the splits' partial results.

Decode kernel: one CTA of one warpgroup (128 threads, no warp roles, so several CTAs share an
SM) per (key split, query tile, batch * heads_kv). The query tile packs the GROUP = heads_q /
heads_kv query heads that share key/value head hk with S_TILE query positions into the 64 rows
of one m64 wgmma: row r is query head hk*GROUP + r % GP at position s_tile*S_TILE + r // GP (GP =
GROUP rounded up to a power of two, S_TILE = 64 / GP; rows past GROUP or past seqlen_q compute
and are never stored). So every key/value tile is read once for all heads of its group.

Per CTA (every line below is in the kernel):
    L = cache_seqlens[b] clamped to 0..capacity (broadcast load, lk.index_value); the CTA's
        key blocks are [begin, end) of split `split` (ceil(blocks / splits) each); it runs
        n_end = max(end - begin, 1) ring steps on blocks j = end-1 .. begin (a split with no
        block runs one fully masked block, giving O = 0, lse = -inf)
    Q: plain masked loads straight into the registers of the wgmma A operand (RS wgmma; with
        Q_SHARED, head dim 256, stored on into a shared tile for SS wgmmas)
    thread 0 TMA-loads K_j and V_j (from page block_table[b, j // blocks_per_page], or from
        BN / page_size pages for pages smaller than a block, or batch row b of a contiguous
        cache) for the first STAGES steps into a ring (k_full, v_full)
    per step i: wait k_full; S = Q K_j^T; online softmax (masked on the first n_masked steps:
        keys past L, and causal keys past L - seqlen_q + 1 + s for query position s);
        step 0 zeroes the V rows of keys past L (a cache's unwritten slots may hold NaN, and
        0 * NaN is NaN in P V; K needs nothing: masked scores become -inf); wait v_full;
        O = O * alpha + P V; wait; bar.sync (every warp is done with the stage); thread 0
        refills the stage with step i + STAGES
    epilogue: O / l and lse (natural log) of the packed rows, stored with masked plain stores
        into o and lse (bf16 O, one split) or into the f32 partials o_part and lse_part

Numerics are the forward kernel's (recipes/_flash_attention_kernel.py: running max in score
units, exp2 with the scale folded into one fma, l per thread summed across the quad once;
Consumer.softmax is reused). Combine kernel: one warp per (batch, query position, query head);
lse = log sum_s exp(lse_s) and o = sum_s exp(lse_s - lse) o_s, O = 0 and lse = -inf where no
split saw a key.
"""
from __future__ import annotations

import layoutkit as lk
from layoutkit.algebra import Layout

from recipes import _flash_attention_kernel as base
from recipes._flash_attention_varlen import CHUNK, row_chunks

WG_ROWS, LOG2E, LN2, NEG_INF = base.WG_ROWS, base.LOG2E, base.LN2, base.NEG_INF
THREADS = 128                  # one warpgroup
EVERYONE = lk.TVLayout((1,), Layout((THREADS, 1), (0, 0)))     # every thread, one element
COMBINE_HEADS = 4              # query heads per combine CTA (one warp each)
SPLIT_CHUNK = 8                # splits whose partials a combine warp loads at once


def packing(group: int) -> tuple[int, int]:
    """(GP, S_TILE): the rows per query position (GROUP rounded up to a power of two) and the
    query positions per 64-row tile, for a GROUP of query heads per key/value head (1..64).

    >>> [packing(g) for g in (1, 4, 5, 8, 64)]
    [(1, 64), (4, 16), (8, 8), (8, 8), (64, 1)]
    """
    gp = 1 << (group - 1).bit_length()
    return gp, WG_ROWS // gp


def packed_view(x, group: int, heads_kv, head_mode: int, seq_mode: int, outer: tuple,
                d: bool):
    """The global tensor over x's memory with modes (g, s[, head_dim], hk, *outer): query head
    hk*group + g at query position s. x is a Tensor parameter; head_mode, seq_mode and outer
    name its modes; d adds its last mode (head_dim, stride 1) after s."""
    st, sh = x.stride, x.shape
    modes = [(group, st[head_mode]), (sh[seq_mode], st[seq_mode])]
    if d:
        modes.append((sh[-1], 1))
    modes.append((heads_kv, group * st[head_mode]))
    modes += [(sh[m], st[m]) for m in outer]
    shape, stride = zip(*modes)
    return lk.global_tensor(x.ptr, Layout(shape, stride), shape)


def packed_rows(x, group: int, gp: int, s_tile: int, coords: tuple, d: int | None,
                tv: lk.TVLayout):
    """This thread's values of the 64-row packed tile of `x` (a packed_view) at query tile
    coords[0] (coords[1:]: the outer modes' indices), under `tv`, a TV layout over a (64, d)
    or (64, 1) tile whose row r is (r % gp, r // gp)."""
    tile = (gp, s_tile) + ((d,) if d else ()) + (1,) * (len(coords) - 1)
    index = (0, coords[0]) + ((0,) if d else ()) + tuple(coords[1:])
    return x.tile(tile, index).partition(lk.TVLayout(tile, tv.layout))


def store_packed(part, x) -> None:
    """Store register tensor x (over a (64, n) tile) into `part`, a packed_rows partition
    with the same thread-value map."""
    lk.store(part, lk.RegisterTensor(x.dtype, part.tv, x.values))


def decode_body(q: lk.Tensor[lk.bf16, 4], k_cache: lk.Tensor[lk.bf16, 4],
                v_cache: lk.Tensor[lk.bf16, 4], block_table: lk.Tensor[lk.i32, 2],
                cache_seqlens: lk.Tensor[lk.i32, 1], o: lk.Tensor[lk.bf16, 4],
                o_part: lk.Tensor[lk.f32, 5], lse: lk.Tensor[lk.f32, 4], SPLITS: lk.i32,
                PAGE_BLOCKS: lk.i32, SCALE_LOG2: lk.f32, GROUP: lk.constexpr, D: lk.constexpr,
                BN: lk.constexpr, STAGES: lk.constexpr, Q_SHARED: lk.constexpr,
                PAGED: lk.constexpr, PAGE_ROWS: lk.constexpr, CAUSAL: lk.constexpr,
                PARTIAL: lk.constexpr):
    """The decode kernel (module docstring). q, o (batch, seqlen_q, heads_q, head_dim); k_cache,
    v_cache (batch, seqlen_cache, heads_kv, head_dim), or with PAGED (num_pages, page_size,
    heads_kv, head_dim) and block_table (batch, max_pages); cache_seqlens (batch,); lse
    (splits, batch, heads_q, seqlen_q); o_part (splits, batch, seqlen_q, heads_q, head_dim),
    written instead of o when PARTIAL (else o and lse[0] are the results). TMA boxes have
    PAGE_ROWS rows (BN, or a page_size below BN: BN / page_size pages a key block);
    PAGE_BLOCKS = page_size / PAGE_ROWS (1 for a contiguous cache); Q_SHARED: Q read from
    shared memory (an SS wgmma, for head dims whose Q would not fit in registers beside O).
    Grid (SPLITS, query tiles, batch * heads_kv)."""
    split, m_tile, bh = lk.block_id(0), lk.block_id(1), lk.block_id(2)
    HK = k_cache.shape[2]
    hk, b = bh % HK, bh // HK
    GP, S_TILE = packing(GROUP)
    # the forward kernel's mode order (seqlen, head_dim, heads, batch or page)
    K, V = (x.permute(1, 3, 2, 0) for x in (k_cache, v_cache))
    if PAGED:
        capacity = block_table.shape[1] * k_cache.shape[1]
    else:
        capacity = k_cache.shape[1]
    length = lk.index_value(lk.load(cache_seqlens.tile((1,), (b,)).partition(EVERYONE)),
                            name="cache_seqlen")
    L = named(lk.minimum(lk.maximum(length, 0), capacity), "L", 0)
    blocks = (L + BN - 1) // BN
    per_split = (blocks + SPLITS - 1) // SPLITS
    begin = named(lk.minimum(split * per_split, blocks), "begin", 0)
    end = lk.minimum(begin + per_split, blocks)
    n_end = named(lk.maximum(end - begin, 1), "n_end", 1)
    # blocks below `unmasked` need no mask: every row sees all their keys
    if CAUSAL:
        first_limit = lk.minimum(L, L - q.shape[1] + 1 + m_tile * S_TILE)
    else:
        first_limit = L
    unmasked = lk.maximum(first_limit // BN, 0)
    n_masked = named(lk.maximum(lk.minimum(end - lk.maximum(unmasked, begin), n_end), 1),
                     "n_masked", 1)
    buffers = rings(D, BN, STAGES, Q_SHARED)
    e = base.Env(**buffers, **locals())
    prefill(e)
    DecodeConsumer(e).run()


def named(value, name: str, lo: int):
    """The kernel integer `value` as a symbol of its own (a register, lk.index_value), so the
    expressions built on it stay small; lo: its proven lower bound."""
    return lk.index_value(lk.cast(value, lk.i32), name=name, lo=lo)


def rings(D: int, BN: int, STAGES: int, Q_SHARED: bool) -> dict:
    """The K and V rings and their full barriers, initialised (every thread passes the
    barrier after the init), and with Q_SHARED the Q tile."""
    shared_q = dict(sQ=lk.shared_tensor(base.tile_layout(WG_ROWS, D), lk.bf16, name="sQ")) \
        if Q_SHARED else {}
    sK = lk.shared_tensor(base.tile_layout(BN, D, STAGES), lk.bf16, name="sK")
    sV = lk.shared_tensor(base.tile_layout(BN, D, STAGES), lk.bf16, name="sV")
    k_full = lk.sm90.mbarrier_array(STAGES, 1, name="k_full")
    v_full = lk.sm90.mbarrier_array(STAGES, 1, name="v_full")
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.mbarrier_init(k_full, v_full)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    return dict(sK=sK, sV=sV, k_full=k_full, v_full=v_full, **shared_q)


def key_block(e, i):
    """The key block of ring step i, begin + n_end-1-i (clamped at 0 for steps past n_end,
    whose page lookups are never used)."""
    return lk.maximum(e.begin + e.n_end - 1 - i, 0)


def page_of(e, i) -> tuple:
    """The pages holding ring step i's keys, one per PAGE_ROWS-row box of its block (a paged
    cache: block_table[b, box // PAGE_BLOCKS], loaded by every thread, the same element), or
    (b,) for a contiguous cache. Steps look their pages up a full ring lap before loading
    them, so the lookups' latency is hidden."""
    if not e.PAGED:
        return (e.b,)
    pages = []
    for u in range(e.BN // e.PAGE_ROWS):
        slot = (key_block(e, i) * (e.BN // e.PAGE_ROWS) + u) // e.PAGE_BLOCKS
        pages.append(lk.index_value(lk.load(e.block_table.tile((1, 1), (e.b, slot))
                                            .partition(lk.TVLayout((1, 1), EVERYONE.layout)))))
    return tuple(pages)


def load_block(e, i, pages) -> None:
    """Thread 0's TMA loads of ring step i's K and V (key block key_block(e, i), in `pages`,
    page_of's) into stage i % STAGES: one box of PAGE_ROWS rows per page."""
    s, boxes = i % e.STAGES, e.BN // e.PAGE_ROWS
    for ring, full, cache in ((e.sK, e.k_full, e.K), (e.sV, e.v_full, e.V)):
        with lk.sm90.expect_tx(full[s]):
            for u, page in enumerate(pages):
                box = key_block(e, i) * boxes + u            # in PAGE_ROWS-row units
                row = box % e.PAGE_BLOCKS if e.PAGED else box
                lk.sm90.tma_load(ring[:, :, :, :, s].tile((e.PAGE_ROWS, e.D, 1, 1), (u, 0, 0, 0)),
                                 cache.tile((e.PAGE_ROWS, e.D, 1, 1), (row, 0, e.hk, page)),
                                 full[s])


def prefill(e) -> None:
    """The first min(STAGES, n_end) ring steps' loads, by thread 0."""
    pages = [page_of(e, i) for i in range(e.STAGES)]
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        for i in range(e.STAGES):
            with lk.if_(i < e.n_end):
                load_block(e, i, pages[i])


class DecodeConsumer(base.Consumer):
    """The warpgroup's work: the forward kernel's wgmma steps and online softmax (inherited:
    scores, pv, softmax) on register Q, with this kernel's masks, ring refills and stores."""

    def __init__(self, e):
        self.wg, self.e = 0, e
        self.c = e.SCALE_LOG2
        self.neg_c = e.SCALE_LOG2 * -1.0
        self.s_layout = lk.sm90.wgmma_accumulator_layout(e.BN)
        self.o_layout = lk.sm90.wgmma_accumulator_layout(e.D)
        self.row0, self.col0, self.drow, self.dcol = base.row_col(self.s_layout,
                                                                  lk.sm90.thread_id_in_warpgroup())
        a_layout = lk.sm90.wgmma_a_layout(e.D)
        Q = packed_view(e.q, e.GROUP, e.HK, 2, 1, (0,), True)
        values = lk.load(packed_rows(Q, e.GROUP, e.GP, e.S_TILE, (e.m_tile, e.hk, e.b), e.D,
                                     a_layout))
        self.sQ2 = lk.RegisterTensor(lk.bf16, a_layout, values.values)   # the A operand
        if e.Q_SHARED:        # an SS wgmma reads Q from shared memory: its registers free
            tile = e.sQ[:, :, 0, 0]
            lk.store(tile.partition(a_layout), self.sQ2)
            lk.sm90.fence_proxy_async()         # generic stores, read by the wgmma's proxy
            lk.barrier()
            self.sQ2 = tile

    def mask(self, S, j):
        """S with -inf at keys j*BN + col >= L and (causal) past query position s's last key,
        L - seqlen_q + s (s = the row's query position)."""
        e = self.e
        limits = {}
        for r in sorted(set(self.drow)):
            limit = e.L - j * e.BN - self.col0
            if e.CAUSAL:
                s = e.m_tile * e.S_TILE + (self.row0 + r) // e.GP
                limit = lk.minimum(limit, e.L - e.q.shape[1] + 1 + s - j * e.BN - self.col0)
            limits[r] = lk.cast(limit, lk.i32)
        keep = lk.RegisterTensor(lk.bool_, S.layout,
                                 [(limits[r] > dc).value for r, dc in zip(self.drow, self.dcol)])
        return lk.where(keep, S, NEG_INF)

    def zero_v_tail(self, j) -> None:
        """Zero the rows of V stage 0 (ring step 0, block j) whose keys are at or past L, then
        make the writes visible to the wgmma (async proxy) of every warp."""
        e = self.e
        tv = row_chunks(e.D)                     # 16 bytes a thread, rows of the stage
        slab = tv.tile
        first_row = lk.thread_id() // (e.D // CHUNK)
        lk.sm90.mbarrier_wait(e.v_full[0], 0)
        stage = e.sV[:, :, :, :, 0]
        for t in range(e.BN // slab[0]):
            with lk.if_(j * e.BN + t * slab[0] + first_row >= e.L):
                lk.store(stage.tile(slab, (t, 0, 0, 0)).partition(tv), lk.full(tv, 0.0, lk.bf16))
        lk.sm90.fence_proxy_async()
        lk.barrier()

    def first_pv(self, P):
        """O = P V of ring step 0 into a fresh accumulator (issued, committed)."""
        e = self.e
        lk.sm90.mbarrier_wait(e.v_full[0], 0)
        lk.sm90.wgmma_fence()
        O = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(e.D), P, e.sV[:, :, 0, 0, 0].T,
                          accumulate=False)
        lk.sm90.wgmma_commit()
        return O

    def refill(self, i, page) -> None:
        """Every warp is done with ring step i's stage: thread 0 loads step i + STAGES (in
        `page`) into it."""
        e = self.e
        lk.barrier()
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            with lk.if_(i + e.STAGES < e.n_end):
                load_block(e, i + e.STAGES, page)

    def block(self, i, carry, masked: bool, first: bool = False):
        """Ring step i (key block begin + n_end-1-i): S, softmax, O = O * alpha + P V, the
        stage's refill; returns the new (O, m, l)."""
        e = self.e
        j = e.begin + e.n_end - 1 - i
        ahead = page_of(e, i + e.STAGES)        # the refill's page, looked up early
        O, m, l = carry
        S, _ = self.scores(i, j)
        lk.sm90.wgmma_wait(0)
        P, m, l, alpha = self.softmax(S, m, l, masked, j)
        if alpha is not None:
            O = O * lk.broadcast(alpha, self.o_layout)
        if first:
            self.zero_v_tail(j)
            O = self.first_pv(lk.cast(P, lk.bf16))
        else:
            O, _ = self.pv(O, lk.cast(P, lk.bf16), i)
        lk.sm90.wgmma_wait(0)
        self.refill(i, ahead)
        return O, m, l

    def run(self) -> None:
        e = self.e
        carry = self.block(0, (None, None, None), True, first=True)
        for masked, start, stop in ((True, 1, e.n_masked), (False, e.n_masked, e.n_end)):
            loop = lk.range(start, stop, carry=carry)
            for i, values in loop:
                loop.next(*self.block(i, values, masked))
            carry = loop.results
        self.epilogue(carry)

    def epilogue(self, carry) -> None:
        """O / l and the lse of the packed rows, stored by masked plain stores."""
        e, o_layout = self.e, self.o_layout
        O, row_lse = self.normalized(*carry)
        where = (e.m_tile, e.hk, e.b)
        if e.PARTIAL:
            rows = packed_view(e.o_part, e.GROUP, e.HK, 3, 2, (1, 0), True)
            store_packed(packed_rows(rows, e.GROUP, e.GP, e.S_TILE, where + (e.split,), e.D,
                                     o_layout), O)
        else:
            rows = packed_view(e.o, e.GROUP, e.HK, 2, 1, (0,), True)
            store_packed(packed_rows(rows, e.GROUP, e.GP, e.S_TILE, where, e.D, o_layout),
                         lk.cast(O, lk.bf16))
        LSE = packed_view(e.lse, e.GROUP, e.HK, 2, 3, (1, 0), False)
        with lk.if_(lk.eq(lk.lane_id() % 4, 0)):        # one lane of each row's quad
            store_packed(packed_rows(LSE, e.GROUP, e.GP, e.S_TILE, where + (e.split,), None,
                                     row_lse.layout), row_lse)


decode_kernel = lk.kernel(decode_body, num_warps=THREADS // 32)


def combine_body(o_part: lk.Tensor[lk.f32, 5], lse_part: lk.Tensor[lk.f32, 4],
                 o: lk.Tensor[lk.bf16, 4], lse: lk.Tensor[lk.f32, 3], D: lk.constexpr):
    """o (batch, seqlen_q, heads_q, head_dim) and lse (batch, heads_q, seqlen_q) from the
    splits' o_part (splits, batch, seqlen_q, heads_q, head_dim) and lse_part (splits, batch,
    heads_q, seqlen_q). Grid (ceil(heads_q / 4), seqlen_q, batch): warp w takes query head
    4 * block_id(0) + w, lane l its head_dim columns l*D/32 .. (l+1)*D/32 - 1; the splits
    are read SPLIT_CHUNK at a time (one round trip per chunk, not per split)."""
    h_tile, s, b = lk.block_id(0), lk.block_id(1), lk.block_id(2)
    per_lane = D // 32
    row_tv = lk.TVLayout((1, 1, COMBINE_HEADS, D),
                         Layout(((32, COMBINE_HEADS), per_lane),
                                ((COMBINE_HEADS * per_lane, 1), COMBINE_HEADS)))
    lse_tv = lk.TVLayout((1, 1, COMBINE_HEADS, 1),
                         Layout(((32, COMBINE_HEADS), 1), ((0, 1), 0)))
    splits = o_part.shape[0]

    def lse_of(i):
        value = lk.load(lse_part.tile((1, 1, COMBINE_HEADS, 1), (i, b, h_tile, s))
                        .partition(lse_tv), other=NEG_INF)
        return lk.RegisterTensor(lk.f32, row_tv, [value.values[0]] * per_lane)

    def rows(x, i):
        return x.tile((1, 1, 1, COMBINE_HEADS, D), (i, b, s, h_tile, 0)).partition(
            lk.TVLayout((1, 1, 1, COMBINE_HEADS, D), row_tv.layout))

    # splits in chunks of SPLIT_CHUNK (their loads in flight together), online rescaling
    loop = lk.range(0, (splits + SPLIT_CHUNK - 1) // SPLIT_CHUNK,
                    carry=(lk.full(row_tv, NEG_INF), lk.full(row_tv, 0.0), lk.full(row_tv, 0.0)))
    for c, (m, acc, total) in loop:
        chunk = [c * SPLIT_CHUNK + u for u in range(SPLIT_CHUNK)]
        lses = [lse_of(i) for i in chunk]                         # -inf past the last split
        parts = [lk.RegisterTensor(lk.f32, row_tv, lk.load(rows(o_part, i)).values)
                 for i in chunk]                                  # 0 past the last split
        m_new = m
        for x in lses:
            m_new = lk.maximum(m_new, x)
        m_use = lk.where(m_new > NEG_INF, m_new, 0.0)
        rescale = lk.exp2((m - m_use) * LOG2E)                    # m = -inf: 0
        acc, total = acc * rescale, total * rescale
        for x, part in zip(lses, parts):
            w = lk.exp2((x - m_use) * LOG2E)
            acc, total = lk.fma(part, w, acc), total + w
        loop.next(m_new, acc, total)
    m, acc, total = loop.results
    m_use = lk.where(m > NEG_INF, m, 0.0)
    seen = total > 0.0
    out = acc * lk.where(seen, 1.0 / lk.where(seen, total, 1.0), 0.0)
    lk.store(o.tile((1, 1, COMBINE_HEADS, D), (b, s, h_tile, 0)).partition(row_tv),
             lk.cast(out, lk.bf16))
    row_lse = lk.where(seen, m_use + lk.log2(lk.where(seen, total, 1.0)) * LN2, NEG_INF)
    with lk.if_(lk.eq(lk.lane_id(), 0)):
        out_tv = lk.TVLayout((1, COMBINE_HEADS, 1), lse_tv.layout)
        lk.store(lse.tile(out_tv.tile, (b, h_tile, s)).partition(out_tv),
                 lk.RegisterTensor(lk.f32, out_tv, [row_lse.values[0]]))


combine_kernel = lk.kernel(combine_body, num_warps=COMBINE_HEADS)
