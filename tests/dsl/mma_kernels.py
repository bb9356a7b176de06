"""Kernels of the sm_80 matrix path (cp.async, ldmatrix, mma.sync), shared by the CPU tests
(PTX, IR, errors) and the GPU tests (tests/gpu/test_recipe_mma_gemm_gpu.py). Module level, so
errors name this file."""
import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle

ATOMS = lk.sm80.mma_sync_layouts("m16n8k16", lk.bf16, lk.f32)
# one warp copies a (16, 16) tile: lane (c, r) copies row r, columns 8c..8c+7 (16 bytes)
COPY_MK = lk.TVLayout((16, 16), Layout(((2, 16), 8), ((128, 1), 16)))
# an (8, 16) (n, k) tile, n contiguous: lane (c, k) copies n = 4c..4c+3 of row k (8 bytes)
COPY_NK_N_CONTIGUOUS = lk.TVLayout((8, 16), Layout(((2, 16), 4), ((4, 8), 1)))
# the same tile, k contiguous: lane (c, n) copies k = 4c..4c+3 of row n (8 bytes)
COPY_NK_K_CONTIGUOUS = lk.TVLayout((8, 16), Layout(((4, 8), 4), ((32, 1), 8)))


@lk.kernel(num_warps=1)
def one_mma(a: lk.Pointer[lk.bf16], b: lk.Pointer[lk.bf16], c: lk.Pointer[lk.f32],
            B_KMAJOR: lk.constexpr):
    """c (16 x 8, row-major f32) = a (16 x 16 row-major) @ b (16 x 8 row-major; or, with
    B_KMAJOR, b stored as its transpose 8 x 16 row-major): cp.async into shared, ldmatrix
    (x4 for a; x2, .trans when b is n-contiguous), one mma.sync.m16n8k16."""
    sa = lk.shared_tensor(ComposedLayout(Swizzle(1, 3, 3), 0, Layout((16, 16), (16, 1))), lk.bf16)
    sb = lk.shared_tensor(Layout((8, 16), (16, 1) if B_KMAJOR else (1, 8)), lk.bf16)
    A = lk.global_tensor(a, Layout((16, 16), (16, 1)))
    B = lk.global_tensor(b, Layout((8, 16), (16, 1) if B_KMAJOR else (1, 8)))
    copy_b = COPY_NK_K_CONTIGUOUS if B_KMAJOR else COPY_NK_N_CONTIGUOUS
    lk.sm80.cp_async(sa.partition(COPY_MK), A.partition(COPY_MK))
    lk.sm80.cp_async(sb.partition(copy_b), B.partition(copy_b))
    lk.sm80.cp_async_commit()
    lk.sm80.cp_async_wait(0)
    lk.barrier()
    acc = lk.sm80.mma_sync(lk.full(ATOMS.c, 0.0, lk.f32), lk.sm80.ldmatrix(sa.partition(ATOMS.a)),
                           lk.sm80.ldmatrix(sb.partition(ATOMS.b)))
    lk.store(lk.global_tensor(c, Layout((16, 8), (8, 1))).partition(ATOMS.c), acc)


@lk.kernel(num_warps=1)
def ragged_copy(x: lk.Pointer[lk.bf16], y: lk.Pointer[lk.bf16], m: lk.i32, n: lk.i32):
    """y = x for the (16, 16) tile at the origin of a row-major (m, n) matrix, through shared
    memory by cp.async (elements past m or n zero-filled in shared, not written back)."""
    s = lk.shared_tensor(Layout((16, 16), (16, 1)), lk.bf16)
    X = lk.global_tensor(x, Layout((m, n), (n, 1))).tile((16, 16), (0, 0))
    lk.sm80.cp_async(s.partition(COPY_MK), X.partition(COPY_MK))
    lk.sm80.cp_async_commit()
    lk.sm80.cp_async_wait(0)
    lk.barrier()
    Y = lk.global_tensor(y, Layout((m, n), (n, 1))).tile((16, 16), (0, 0))
    lk.store(Y.partition(COPY_MK), lk.load(s.partition(COPY_MK)))
