"""Reads of shared memory nothing wrote, run on the CPU interpreter: shared memory starts
poisoned, every write path (stores, stmatrix, cp.async and TMA load completion) marks its bytes,
and the first read of a poisoned byte is an UnwrittenReadError naming the read, the buffer and
the bytes, with the line of the relevant write where there is one (the static check's own
findings are warnings here: debug builds)."""
import re
import warnings

import numpy as np
import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle
from layoutkit.dsl.interpreter import UnwrittenReadError, interpret, to_bf16

from ..dsl.source_lines import line_of

BF16 = lk.Pointer[lk.bf16]
F32 = lk.Pointer[lk.f32]
SW128 = Swizzle(3, 3, 3)
OWN = lk.TVLayout((32,), Layout((32, 1), (1, 0)))          # thread t: element t
ONE = lk.TVLayout((32,), Layout((32, 1), (0, 0)))          # every thread: element 0


def L(marker: str) -> int:
    return line_of(__file__, marker)


def first_thread():
    return lk.if_(lk.eq(lk.thread_id(), 0))


def run_error(kernel, grid, *args) -> UnwrittenReadError:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lk.ProtocolWarning)     # debug build: run anyway
        with pytest.raises(UnwrittenReadError) as info:
            interpret(kernel, grid, *args)
    return info.value


def check(err, marker: str, message: str) -> None:
    """`err` says `message` after its 'CTA ... thread ...: ' context and points at `marker`."""
    text = re.sub(r"^CTA \([0-9, ]+\)( thread \d+ \(warp \d+, lane \d+\))?: ", "", err.message)
    assert text == message, f"\n{text}\n!=\n{message}"
    assert err.location is not None and err.location.line == L(marker)


@lk.kernel(num_warps=4, debug=True)
def wgmma_of_a_half_loaded_pair(a: BF16, c: F32, LOAD_B: lk.constexpr):
    """c = a @ b^T for one 64 x 64 tile pair TMA-loaded into sA and sB (sB not at all unless
    LOAD_B)."""
    A = lk.global_tensor(a, Layout((64, 64), (64, 1)))
    C = lk.global_tensor(c, Layout((64, 64), (64, 1)))
    tile = ComposedLayout(SW128, 0, Layout((64, 64), (64, 1)))
    sA = lk.shared_tensor(tile, lk.bf16, name="sA")
    sB = lk.shared_tensor(tile, lk.bf16, name="sB")
    full = lk.sm90.mbarrier_array(1, 1, name="full")
    with first_thread():
        lk.sm90.mbarrier_init(full)
        lk.sm90.fence_mbarrier_init()
    lk.barrier()
    with first_thread(), lk.sm90.expect_tx(full[0]):
        lk.sm90.tma_load(sA, A.tile((64, 64), (0, 0)), full[0])
        if LOAD_B:
            lk.sm90.tma_load(sB, A.tile((64, 64), (0, 0)), full[0])
    lk.sm90.mbarrier_wait(full[0], 0)
    lk.sm90.wgmma_fence()
    acc = lk.sm90.wgmma(lk.sm90.wgmma_accumulator(64), sA, sB, accumulate=False)           # THE MMA
    lk.sm90.wgmma_commit()
    lk.sm90.wgmma_wait(0)
    lk.store(C.partition(acc.layout), acc)


def test_wgmma_of_loaded_operands_runs():
    a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    c = np.zeros((64, 64), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lk.ProtocolWarning)
        interpret(wgmma_of_a_half_loaded_pair, 1, to_bf16(a), c, True)
    bf = (to_bf16(a).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_allclose(c, bf @ bf.T, rtol=1e-4, atol=1e-3)


def test_wgmma_reading_an_operand_nothing_wrote():
    a = to_bf16(np.ones((64, 64), np.float32))
    err = run_error(wgmma_of_a_half_loaded_pair, 1, a, np.zeros((64, 64), np.float32), False)
    check(err, "# THE MMA",
          f"the wgmma at line {L('# THE MMA')} reads sB bytes 0..8191, but no op of the kernel "
          "writes sB: shared memory starts undefined, so the read sees garbage; write the "
          "buffer (lk.store, lk.sm90.tma_load, lk.sm80.cp_async) and synchronise before reading it")


@lk.kernel(num_warps=1)
def read_before_write(x: F32, y: F32):
    """Thread 0 reads its shared element, then writes it (from x): the read comes first."""
    s = lk.shared_tensor(Layout(32), lk.f32, name="s")
    X, Y = lk.global_tensor(x, Layout(32)), lk.global_tensor(y, Layout(32))
    with first_thread():
        got = lk.load(s.partition(OWN))                                           # READ FIRST
        lk.store(s.partition(OWN), lk.load(X.partition(OWN)))                     # WRITE AFTER
        lk.store(Y.partition(OWN), got)


def test_read_of_an_element_before_its_own_write():
    err = run_error(read_before_write, 1, np.ones(32, np.float32), np.zeros(32, np.float32))
    check(err, "# READ FIRST",
          f"the shared load of 1 x f32 from s at line {L('# READ FIRST')} reads s bytes 0..3, "
          "which nothing had written yet: the shared store of 1 x f32 to s at line "
          f"{L('# WRITE AFTER')} wrote them only after the read; shared memory starts "
          "undefined, so the read saw garbage; order the write before the read (lk.barrier(), "
          "or an mbarrier wait on the phase a copy completes)")


@lk.kernel(num_warps=1, debug=True)
def read_past_the_written_half(x: F32, y: F32):
    """The threads write elements 0-31 of s (64 elements); after a barrier each reads element
    32."""
    s = lk.shared_tensor(Layout(64), lk.f32, name="s")
    X, Y = lk.global_tensor(x, Layout(32)), lk.global_tensor(y, Layout(32))
    lk.store(s.tile((32,), (0,)).partition(OWN), lk.load(X.partition(OWN)))       # FIRST HALF
    lk.barrier()
    lk.store(Y.partition(ONE), lk.load(s.tile((32,), (1,)).partition(ONE)))       # ELEMENT 32


def test_read_of_an_element_no_thread_wrote():
    err = run_error(read_past_the_written_half, 1, np.ones(32, np.float32),
                    np.zeros(32, np.float32))
    check(err, "# ELEMENT 32",
          f"the shared load of 1 x f32 from s at line {L('# ELEMENT 32')} reads s bytes "
          "128..131, which nothing in the run wrote: the shared store of 1 x f32 to s at line "
          f"{L('# FIRST HALF')} wrote s bytes 0..127, not these; shared memory starts "
          "undefined, so the read saw garbage; write every byte that is read (or read only the "
          "bytes written)")
