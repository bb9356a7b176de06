"""wgmma kernels shared by the CPU tests (PTX, SASS, descriptors) and the GPU tests
(tests/gpu/test_dsl_wgmma_gpu.py). Shared tiles are filled with plain DSL loads/stores (no TMA),
then `lk.sm90.fence_proxy_async()` + `lk.barrier()` make them visible to wgmma (async proxy)."""
import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle

BK = 64          # K per tile: one 128-byte swizzle row of bf16


def k_major_tile(rows: int):
    """rows x 64 bf16, K contiguous, 128-byte swizzle (TMA box {64, rows})."""
    return ComposedLayout(Swizzle(3, 3, 3), 0, Layout((rows, BK), (BK, 1)))


def kn_tile(n: int):
    """A 64 x n bf16 tile (K rows, N contiguous) in 64-column chunks of 64 rows x 128 bytes,
    128-byte swizzle: the N-major form of B (lk.transpose makes it n x 64)."""
    return ComposedLayout(Swizzle(3, 3, 3), 0, Layout((BK, (64, n // 64)), (64, (1, 64 * BK))))


def rows_tv(rows: int) -> lk.TVLayout:
    """128 threads over a rows x 64 tile of a row-major matrix: 8 consecutive columns each."""
    return lk.TVLayout((rows, BK), Layout(((8, 16), (8, rows // 16)),
                                          ((rows * 8, 1), (rows, 16))))


def cols_tv(n: int) -> lk.TVLayout:
    """128 threads over a 64 x n tile of a row-major matrix (N contiguous): 8 columns each."""
    across = n // 8
    return lk.TVLayout((BK, n), Layout(((across, 128 // across), (8, BK * across // 128)),
                                       ((BK * 8, 1), (BK, 128 // across))))


def fill(dst, src, tv):
    lk.store(dst.partition(tv), lk.load(src.partition(tv)))


@lk.kernel(num_warps=4)
def ss_gemm(a: lk.Pointer[lk.bf16], b: lk.Pointer[lk.bf16], c: lk.Pointer[lk.f32], K: lk.i32,
            M: lk.constexpr, N: lk.constexpr, B_MAJOR: lk.constexpr):
    """c (M x N, f32) = a (M x K) @ B, one warpgroup: B is b (N x K, row-major) when B_MAJOR is
    "K", b (K x N, row-major) when "N". The K loop carries the accumulator in its registers; the
    first wgmma does not accumulate (scale-d = 0), so the accumulator is never zero-filled."""
    sA = lk.shared_tensor(k_major_tile(M), lk.bf16)
    A = lk.global_tensor(a, Layout((M, K), (K, 1)))
    if B_MAJOR == "K":
        sB = lk.shared_tensor(k_major_tile(N), lk.bf16)
        B = lk.global_tensor(b, Layout((N, K), (K, 1)))
        b_tile, b_tv, b_view = (lambda kt: B.tile((N, BK), (0, kt))), rows_tv(N), sB
    else:
        sB = lk.shared_tensor(kn_tile(N), lk.bf16)
        B = lk.global_tensor(b, Layout((K, N), (N, 1)))
        b_tile, b_tv, b_view = (lambda kt: B.tile((BK, N), (kt, 0))), cols_tv(N), sB.T
    acc = lk.sm90.wgmma_accumulator(N, M)
    loop = lk.range(0, K // BK, carry=(acc,))
    for kt, (acc,) in loop:
        fill(sA, A.tile((M, BK), (0, kt)), rows_tv(M))
        fill(sB, b_tile(kt), b_tv)
        lk.sm90.fence_proxy_async()
        lk.barrier()
        lk.sm90.wgmma_fence()
        acc = lk.sm90.wgmma(acc, sA, b_view, accumulate=kt > 0)
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)
        lk.barrier()                       # every warp is done with the tiles before refilling
        loop.next(acc)
    (acc,) = loop.results
    lk.store(lk.global_tensor(c, Layout((M, N), (N, 1))).partition(acc.layout), acc)


@lk.kernel(num_warps=4)
def attention_tile(q: lk.Pointer[lk.bf16], k: lk.Pointer[lk.bf16], v: lk.Pointer[lk.bf16],
                   s: lk.Pointer[lk.f32], o: lk.Pointer[lk.f32], N: lk.constexpr):
    """s (64 x N) = q (64 x 64) @ k (N x 64)^T from shared (SS); then o (64 x 64) = bf16(s) @ v
    (N x 64, row-major: the N-major B of the second product) with the converted accumulator as
    the register A operand (RS), no data movement between the two."""
    sQ = lk.shared_tensor(k_major_tile(64), lk.bf16)
    sK = lk.shared_tensor(k_major_tile(N), lk.bf16)
    sV = lk.shared_tensor(kn_tile(64) if N == BK else
                          ComposedLayout(Swizzle(3, 3, 3), 0, Layout((N, 64), (64, 1))), lk.bf16)
    fill(sQ, lk.global_tensor(q, Layout((64, 64), (64, 1))), rows_tv(64))
    fill(sK, lk.global_tensor(k, Layout((N, 64), (64, 1))), rows_tv(N))
    fill(sV, lk.global_tensor(v, Layout((N, 64), (64, 1))), cols_tv(64) if N == BK else
         lk.TVLayout((N, 64), Layout(((8, 16), (8, N // 16)), ((N * 8, 1), (N, 16)))))
    lk.sm90.fence_proxy_async()
    lk.barrier()
    lk.sm90.wgmma_fence()
    scores = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(N), sQ, sK, accumulate=False)
    lk.sm90.wgmma_commit()
    lk.sm90.wgmma_wait(0)
    lk.store(lk.global_tensor(s, Layout((64, N), (N, 1))).partition(scores.layout), scores)
    p = lk.cast(scores, lk.bf16)                  # the A fragment of P @ V (same TV layout)
    lk.sm90.wgmma_fence()
    out = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), p, sV.T, accumulate=False)
    lk.sm90.wgmma_commit()
    lk.sm90.wgmma_wait(0)
    lk.store(lk.global_tensor(o, Layout((64, 64), (64, 1))).partition(out.layout), out)


@lk.kernel(num_warps=12)
def consumer_mainloop(a: lk.Pointer[lk.bf16], b: lk.Pointer[lk.bf16], c: lk.Pointer[lk.f32],
                      K: lk.i32):
    """Register budget of the warp-specialized GEMM: a producer warpgroup (24 registers) and two
    consumer warpgroups (240) each keeping a 64 x 256 f32 accumulator (128 registers) in place
    across the K loop over 128 x 64 (A) and 256 x 64 (B) swizzled tiles. (The producer fills
    nothing: this kernel checks code generation, not data.)"""
    sA = lk.shared_tensor(k_major_tile(128), lk.bf16)
    sB = lk.shared_tensor(k_major_tile(256), lk.bf16)
    with lk.sm90.warp_role("producer", warpgroups=(0,), registers=24):
        pass
    with lk.sm90.warp_role("consumer", warpgroups=(1, 2), registers=240):
        wg = lk.sm90.warpgroup_id() - 1
        acc = lk.sm90.wgmma_accumulator(256)
        loop = lk.range(0, K // BK, carry=(acc,))
        for kt, (acc,) in loop:
            lk.sm90.wgmma_fence()
            acc = lk.sm90.wgmma(acc, sA.tile((64, BK), (wg, 0)), sB, accumulate=kt > 0)
            lk.sm90.wgmma_commit()
            lk.sm90.wgmma_wait(0)
            loop.next(acc)
        (acc,) = loop.results
        stacked = lk.sm90.warpgroup_stack(acc.layout, 3)
        C = lk.global_tensor(c, Layout((192, 256), (256, 1)))
        lk.store(C.partition(stacked), lk.RegisterTensor(lk.f32, stacked, acc.values))


# ---- small kernels' pieces (the wgmma discipline tests: tests/misuse, tests/dsl/interpreter) ---
ONES_WRITERS = {4: lk.TVLayout((64, 64), Layout(((8, 16), (8, 4)), ((64 * 8, 1), (64, 16)))),
                8: lk.TVLayout((64, 64), Layout(((8, 16, 2), (8, 2)),
                                                ((64 * 8, 1, 32), (64, 16))))}


def ones_operand(warps: int = 4):
    """A written 64 x 64 bf16 wgmma operand of ones (128-byte swizzle, buffer "s"), visible to
    the async proxy; `warps` of the kernel write it."""
    s = lk.shared_tensor(k_major_tile(64), lk.bf16, name="s")
    lk.store(s.partition(ONES_WRITERS[warps]), lk.full(ONES_WRITERS[warps], 1.0, lk.bf16))
    lk.sm90.fence_proxy_async()
    lk.barrier()
    return s


def accumulator_out(c):
    """The 64 x 64 f32 row-major output `c` partitioned by a warpgroup's accumulator layout."""
    return lk.global_tensor(c, Layout((64, 64), (64, 1))).partition(
        lk.sm90.wgmma_accumulator_layout(64))
