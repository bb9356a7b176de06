"""The device side of recipes/rmsnorm.py: the forward and backward kernel bodies (written once
for every dtype: recipes/rmsnorm.kernel_for retypes their pointers), on the row machinery of
recipes/_rowwise_kernel.py. Their pipeline, split and contract are rmsnorm.py's docstring."""
from __future__ import annotations

import layoutkit as lk
from recipes import _rowwise_kernel as rk


def forward_body(x: lk.Pointer[lk.bf16], res: lk.Pointer[lk.bf16], w: lk.Pointer[lk.bf16],
                  y: lk.Pointer[lk.bf16], res_out: lk.Pointer[lk.bf16],
                  rstd: lk.Pointer[lk.f32], m: lk.i32, nv: lk.i32, eps: lk.f32,
                  P: lk.constexpr, ROWS: lk.constexpr, C: lk.constexpr, K: lk.constexpr,
                  CLUSTER: lk.constexpr, VEC: lk.constexpr,
                  RESIDUAL: lk.constexpr, WEIGHT: lk.constexpr, STORE_RESIDUAL: lk.constexpr,
                  STORE_RSTD: lk.constexpr, STAGED: lk.constexpr,
                  EARLY_WEIGHT: lk.constexpr):
    tv = rk.row_layout(P, ROWS, C, K)
    n = nv * VEC
    row = rk.row_block(CLUSTER)
    full = rk.exchange_barrier(CLUSTER, ROWS, "row_sums_full")

    def rows_of(ptr):
        return rk.rows_view(ptr, m, n, tv, row, CLUSTER)

    inputs = [x] + ([res] if RESIDUAL else [])

    def weight():
        return lk.load(rk.columns_view(w, m, n, tv, row, CLUSTER))
    if STAGED:                                     # x (and res) -> shared memory by cp.async
        staged = [rk.staged_rows(rows_of(t), tv, f"rows_staged{i}") for i, t in enumerate(inputs)]
        lk.sm80.cp_async_commit()
        early = weight() if WEIGHT and EARLY_WEIGHT else None
        rk.loads_issued(CLUSTER)
        lk.sm80.cp_async_wait(0)
        lk.barrier()                               # (the row sums wait for every thread anyway)

        def sums_input():
            return [lk.load(t) for t in staged]
    else:
        raw = [lk.load(rows_of(t)) for t in inputs]
        early = weight() if WEIGHT and EARLY_WEIGHT else None   # beside x: one memory latency
        rk.loads_issued(CLUSTER)                   # a cluster's peers, while x is in flight

        def sums_input():                          # (its first use: after the barrier)
            return raw

    def h_of(values):
        h = lk.cast(values[0], lk.f32)
        return h + lk.cast(values[1], lk.f32) if RESIDUAL else h
    h = h_of(sums_input())
    if STORE_RESIDUAL:
        lk.store(rows_of(res_out), lk.cast(h, res_out.dtype))
    (squares,) = rk.row_sums([h * h], row, P, ROWS, CLUSTER, start=False, barrier=full)
    r = lk.rsqrt(squares * (1.0 / lk.cast(n, lk.f32)) + eps)
    if STAGED:                                     # read again: no row held across the sums
        h = h_of(sums_input())
    out = h * lk.broadcast(r, tv)
    if WEIGHT:                                     # late: after the statistics, a short life
        out = out * lk.cast(weight() if early is None else early, lk.f32)
    lk.store(rows_of(y), lk.cast(out, y.dtype))
    if STORE_RSTD:
        with lk.if_(rk.first_of_row(P, CLUSTER)):
            lk.store(rk.scalars_view(rstd, m, P, ROWS, row), r)


def backward_body(dy: lk.Pointer[lk.bf16], x: lk.Pointer[lk.bf16], w: lk.Pointer[lk.bf16],
                   rstd: lk.Pointer[lk.f32], dx: lk.Pointer[lk.bf16],
                   partial: lk.Pointer[lk.f32], m: lk.i32, nv: lk.i32, rounds: lk.i32,
                   ctas: lk.i32, P: lk.constexpr, ROWS: lk.constexpr, C: lk.constexpr,
                   K: lk.constexpr, CLUSTER: lk.constexpr, VEC: lk.constexpr,
                   WEIGHT: lk.constexpr):
    tv = rk.row_layout(P, ROWS, C, K)
    n = nv * VEC
    inv_n = 1.0 / lk.cast(n, lk.f32)
    acc = rk.Accumulator(P, ROWS, C, K, "dw") if WEIGHT else None
    rk.peers_started(CLUSTER)                      # then each round's exchange: no first barrier
    for i in lk.range(0, rounds):
        row = rk.row_block(CLUSTER) + i * ctas            # past the last tile: every access masked
        X, DY = (rk.rows_view(t, m, n, tv, row, CLUSTER) for t in (x, dy))
        W = rk.columns_view(w, m, n, tv, row, CLUSTER)

        def xhat_and_g():                           # loaded again after the row sum: its
            r = lk.broadcast(lk.load(rk.scalars_view(rstd, m, P, ROWS, row)), tv)
            dyv = lk.cast(lk.load(DY), lk.f32)      # barrier ends their registers' lifetime
            xhat = lk.cast(lk.load(X), lk.f32) * r
            return r, dyv, xhat, (dyv * lk.cast(lk.load(W), lk.f32) if WEIGHT else dyv)
        r, dyv, xhat, g = xhat_and_g()
        if WEIGHT:
            acc.put(lk.fma(dyv, xhat, acc.get()))
        (dot,) = rk.row_sums([g * xhat], row, P, ROWS, CLUSTER, start=False, parity=i % 2)
        r, _, xhat, g = xhat_and_g()
        c = lk.broadcast(dot * inv_n, tv)
        lk.store(rk.rows_view(dx, m, n, tv, row, CLUSTER), lk.cast((g - xhat * c) * r, dx.dtype))
    if WEIGHT:
        acc.store_rows_summed(partial, ctas, n, CLUSTER)
