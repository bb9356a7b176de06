"""The consumers of recipes/_flash_attention_backward_kernel.py's DKV_SPLIT = "head_dim" design
(head dim 256, where dK and dV of 64 keys alone would be 256 f32 registers per thread): one CTA
per 64-key block; the two consumer warpgroups share the block's keys and split head_dim, so
each keeps dK and dV of all 64 keys for its 128 columns (128 registers). Per ring step:

    warpgroup 0:  S^T = K Q^T (SS wgmma over all of head_dim)
                  P^T = exp2(S^T * c + neg_lse2) (masked) -> bf16 -> shared (sP, 2 buffers)
    warpgroup 1:  dP^T = V dO^T (SS wgmma)
                  [barrier A: P^T in shared] P^T from shared; dS^T = P^T * (dP^T - D) -> bf16
                  -> shared (sdS, 2 buffers)
    both:         [barrier B: dS^T in shared] with both operands from shared memory (SS):
                  dV_w += P^T dO[:, w], dK_w += dS^T Q[:, w], dQ[:, w] = dS K[:, w]
                  (w = the warpgroup's 128 columns); dQ[:, w] -> lk.atomic_add, or
                  (DQ_WRITE "tma_reduce") to shared memory for the TMA reduce-add

so the five matrix products are done once each (no recomputed S), at the cost of the two
256-thread barriers and the trip of P^T and dS^T through shared memory. dS uses P^T rounded to
bf16 (it is rounded to bf16 itself right after). The 2 buffers of sP and sdS make a step's
writes safe against the previous step's reads: a warpgroup writes buffer i % 2 only after
barrier A or B of step i, which the other passes only after retiring its step i-1 wgmmas.
"""
from __future__ import annotations

import layoutkit as lk
from recipes import _flash_attention_backward_dq_writer as dq_writer
from recipes._flash_attention_backward_kernel import (BQ, CONSUMERS, EPILOGUE_BARRIER, WG_KEYS,
                                                      Consumer, release)

P_BARRIER, DS_BARRIER = 1, 2          # named barrier ids (256 threads each)
THREADS = CONSUMERS * 128


class ColumnConsumer(Consumer):
    """Consumer warpgroup `wg` of the head_dim split (module docstring): columns wg*D/2 ..."""

    def __init__(self, wg: int, e):
        super().__init__(wg, e)
        self.cols = e.D // CONSUMERS
        self.kv_layout = lk.sm90.wgmma_accumulator_layout(self.cols)
        self.dq_cols, self.dq_layout = self.cols, self.kv_layout

    def own_keys(self, x):
        return x[:, :, 0, 0]                 # every key of the block

    def first_own_key(self):
        return self.e.n_blk * WG_KEYS

    def step(self, i, h, m, dK, dV, masked: bool):
        """Ring step i: query block m of head h; returns the new (dK, dV)."""
        e, wg = self.e, self.wg
        s = lk.sm90.consumer_state(i, e.STAGES)
        sQ, sdO = e.sQ[:, :, 0, 0, s.stage], e.sdO[:, :, 0, 0, s.stage]
        buf = lk.sm90.consumer_state(i, 2).stage
        sP, sdS = e.sP[:, :, 0, 0, buf], e.sdS[:, :, 0, 0, buf]
        if wg == 0:
            lk.sm90.mbarrier_wait(e.q_full[s.stage], s.phase)
            lk.sm90.wgmma_fence()
            S = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(BQ), self.sK_w, sQ, accumulate=False)
            lk.sm90.wgmma_commit()
            lk.sm90.wgmma_wait(0)
            P = lk.exp2(lk.minimum(lk.fma(S, e.SCALE_LOG2,
                                          self.query_values("neg_lse2", s.stage)), 0.0),
                        ftz=True)                                   # P <= 1: the kernel module
            if masked:
                P = self.mask(P, m)
            lk.store(sP.partition(self.s_layout), lk.cast(P, lk.bf16))
            lk.sm90.fence_proxy_async()
            lk.sm90.named_barrier_sync(P_BARRIER, THREADS)
            lk.sm90.named_barrier_sync(DS_BARRIER, THREADS)
            lk.sm90.mbarrier_wait(e.do_full[s.stage], s.phase)
        else:
            lk.sm90.mbarrier_wait(e.do_full[s.stage], s.phase)
            lk.sm90.wgmma_fence()
            dP = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(BQ), self.sV_w, sdO, accumulate=False)
            lk.sm90.wgmma_commit()
            lk.sm90.wgmma_wait(0)
            lk.sm90.named_barrier_sync(P_BARRIER, THREADS)
            P = lk.cast(lk.load(sP.partition(self.s_layout)), lk.f32)
            dS = P * (dP - self.query_values("delta", s.stage))
            lk.store(sdS.partition(self.s_layout), lk.cast(dS, lk.bf16))
            lk.sm90.fence_proxy_async()
            lk.sm90.named_barrier_sync(DS_BARRIER, THREADS)
            lk.sm90.mbarrier_wait(e.q_full[s.stage], s.phase)
        cols = (0, wg)
        lk.sm90.wgmma_fence()
        dV = lk.sm90.wgmma(dV, sP, sdO.tile((BQ, self.cols), cols).T, accumulate=True)
        dK = lk.sm90.wgmma(dK, sdS, sQ.tile((BQ, self.cols), cols).T, accumulate=True)
        dQ = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(self.cols), sdS.T,
                           self.sK_w.tile((WG_KEYS, self.cols), cols).T, accumulate=False)
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)
        release(e.q_empty, s.stage)
        release(e.do_empty, s.stage)
        if e.DQ_WRITE == "tma_reduce":       # this warpgroup's columns, reduced by the TMA
            dq_writer.consumer_hand_off_tma(e, dQ, wg)
        else:
            at = dq_writer.tile_at(e.DQ_SPLIT, e.query_row(h, m), wg)   # its columns
            lk.atomic_add(self.dq_acc.tile((BQ, self.cols), at).partition(self.dq_layout), dQ)
        return dK, dV

    def epilogue(self, dK, dV) -> None:
        """dK and dV of this warpgroup's columns through sK and sV to global memory."""
        e, wg = self.e, self.wg
        lk.sm90.named_barrier_sync(DS_BARRIER, THREADS)      # every read of sK, sV retired
        cols = (0, wg)
        mine = [x.tile((WG_KEYS, self.cols), cols) for x in (self.sK_w, self.sV_w)]
        for buf, acc in zip(mine, (dK, dV)):
            lk.store(buf.partition(self.kv_layout), lk.cast(acc, lk.bf16))
        lk.sm90.fence_proxy_async()
        lk.sm90.named_barrier_sync(EPILOGUE_BARRIER + wg, 128)
        self.store_dkv((WG_KEYS, self.cols, 1, 1), (e.n_blk, wg, e.hk, e.b), (0, wg, 0, 0))
