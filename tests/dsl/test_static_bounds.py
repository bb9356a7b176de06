"""Static bounds on legitimate kernels: views touching exactly the last element, zero strides,
ring stages and loop indices whose range is proven, symbolic extents with declared
divisibility, and 32-bit bounds checks where the bound fits (a GEMM operand with M*K past
2**31 elements still checks each mode in 32 bits). Each traces with no BoundsWarning."""
import warnings

import pytest
import sympy

import layoutkit.dsl as lk
from layoutkit.algebra import ComposedLayout, Layout, Swizzle, symbol
from layoutkit.dsl.core.bounds import needs_64_bits, value_range
from layoutkit.dsl.core.facts import interval

I32 = lk.Pointer[lk.i32]
BF16 = lk.Pointer[lk.bf16]
TV = lk.tv_layout(Layout(128), Layout(1))
RING = ComposedLayout(Swizzle(3, 3, 3), 0, Layout((64, 64, 4), (64, 1, 4096)))


def quiet_ptx(fn, *args, num_warps=4, **constexprs) -> str:
    """The PTX of `fn`, failing on any BoundsWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", lk.BoundsWarning)
        return lk.Kernel(fn, num_warps).ptx(*args, **constexprs)


def checks(ptx: str) -> list[str]:
    return [line.split()[0] for line in ptx.splitlines() if line.strip().startswith("setp.")]


def test_views_touching_exactly_the_last_element():
    seen = {}

    def k(x: I32, n: lk.i32):
        s = lk.shared_tensor(Layout((32, 8), (8, 1)), lk.i32)
        flat = lk.shared_tensor(Layout(1024), lk.i32)
        ring = lk.shared_tensor(RING, lk.bf16)
        seen["row"] = s[31, :]
        seen["corner"] = s[31, 7]
        seen["tile"] = flat.tile((16,), (63,))
        seen["stage"] = ring[:, :, 3].tile((64, 8), (0, 7))
        lk.store(flat.tile((128,), (7,)).partition(TV), lk.full(TV, 1, lk.i32))
    quiet_ptx(k, I32, 8)
    assert seen["row"].offset + seen["row"].layout(7) == 255
    assert seen["corner"].offset == 255
    assert seen["tile"].offset + seen["tile"].layout(15) == 1023
    stage = seen["stage"]
    assert stage.offset + stage.layout((63, 7)) == 64 * 64 * 4 - 1


def test_zero_strides_broadcast():
    def k(x: I32, n: lk.i32):
        row = lk.shared_tensor(Layout((32, 8), (1, 0)), lk.i32)        # 8 views of 32 values
        lk.store(row[:, 7].tile((32,), (0,)).partition(lk.tv_layout(Layout(32), Layout(1))),
                 lk.full(lk.tv_layout(Layout(32), Layout(1)), 1, lk.i32))
        replicated = lk.TVLayout((4,), Layout((32, 4), (0, 1)))      # every lane holds all 4
        lk.full(replicated, 0, lk.i32)
    quiet_ptx(k, I32, 8, num_warps=1)


def test_ring_stages_and_loop_indices_are_proven_in_range():
    def k(x: I32, n: lk.i32):
        ring = lk.shared_tensor(RING, lk.bf16)
        rows = lk.shared_tensor(Layout((4, 128), (128, 1)), lk.i32)
        for j in lk.range(0, n):
            ring[:, :, lk.sm90.producer_state(j, 4).stage]               # Mod(j, 4)
        for i in lk.range(4):
            lk.store(rows[i, :].tile((128,), (0,)).partition(TV), lk.full(TV, 1, lk.i32))
        for i in lk.range(3, -1, -1):
            rows[i, :]
        rows[lk.warp_id(), :]                                       # floor(tid / 32) < 4
    quiet_ptx(k, I32, 8)


def test_warpgroup_index_inside_a_role_is_proven_by_the_roles_threads():
    def k(x: I32, n: lk.i32):
        s = lk.shared_tensor(Layout((128, 64), (64, 1)), lk.i32)
        with lk.sm90.warp_role("producer", warpgroups=(0,)):
            pass
        with lk.sm90.warp_role("consumers", warpgroups=(1, 2)):
            s.tile((64, 64), (lk.sm90.warpgroup_id() - 1, 0))             # 0..1 in this role
    quiet_ptx(k, I32, 8, num_warps=12)


def test_symbolic_extents_with_declared_divisibility_check_in_32_bits():
    def k(x: I32, M: lk.i32, K: lk.i32):
        X = lk.global_tensor(x, Layout((M // 16, K), (K * 16, 1)))
        tv = lk.tv_layout(Layout((8, 16)), Layout((1, 1)))
        lk.store(X.tile((8, 16), (lk.block_id(0), lk.block_id(1))).partition(tv),
                 lk.full(tv, 0, lk.i32))
    ptx = quiet_ptx(k, I32, 4096, 4096)           # M and K are multiples of 16 here
    assert checks(ptx) and set(checks(ptx)) == {"setp.lt.s32"}


def test_gemm_operand_past_2_31_elements_checks_each_mode_in_32_bits():
    """A (M, K) operand with M = K = 65536 has 2**32 elements: each mode's bound (M, K) fits
    i32, so the checks stay 32-bit; the address, M*K-sized, is 64-bit."""
    def k(a: BF16, M: lk.i32, K: lk.i32):
        A = lk.global_tensor(a, Layout((M, K), (K, 1)))
        tv = lk.tv_layout(Layout((16, 8)), Layout((1, 8)))
        tile = A.tile((16, 64), (lk.block_id(0), lk.block_id(1))).partition(tv)
        lk.store(tile, lk.load(tile))
    ptx = quiet_ptx(k, BF16, 65536, 65536)
    assert set(checks(ptx)) == {"setp.lt.s32"}
    assert "mul.lo.s64" in ptx or "mad.lo.s64" in ptx or "mad.wide" in ptx


def test_i64_extent_checks_in_64_bits():
    def k(x: I32, n: lk.i64):
        X = lk.global_tensor(x, Layout(n)).tile((128,), (lk.block_id(),)).partition(TV)
        lk.store(X, lk.full(TV, 0, lk.i32))
    assert checks(quiet_ptx(k, I32, 1 << 33)) == ["setp.lt.s64"]


def test_u32_symbol_in_an_index_expression_is_wide():
    def k(x: I32, n: lk.u32):
        for i in lk.range(0, n):
            pass
    ptx = quiet_ptx(k, I32, 3_000_000_000)
    assert "setp.lt.s32" not in ptx and "cvt.s64.u32" in ptx


def test_symbol_ranges_come_from_the_declared_facts():
    seen = {}

    def k(x: I32, n: lk.i32, m: lk.i32, w: lk.u32):
        trace = lk.core.tracer.current()
        tid = lk.thread_id()
        for i in lk.range(2, n):
            seen["i"] = value_range(trace, i)
        seen["tid"] = value_range(trace, tid)
        seen["bid"] = value_range(trace, lk.block_id())
        seen["n"], seen["m"] = value_range(trace, n), value_range(trace, m)
        seen["n/16"] = value_range(trace, n / 16)
        seen["w"] = value_range(trace, w)
        seen["wide"] = [needs_64_bits(trace, tid, b) for b in (n, n * m, w, 1 << 31, m - 1)]
    lk.Kernel(k, 4).ptx(I32, 64, -3, 5)
    top = (1 << 31) - 1
    assert seen["tid"] == (0, 127) and seen["bid"] == (0, top - 1)     # below gridDim.x
    assert seen["n"] == (16, top // 16 * 16) and seen["m"] == (-(1 << 31), top)
    assert seen["n/16"] == (1, top // 16) and seen["w"] == (1, (1 << 32) - 1)   # 5: positive
    assert seen["i"] == (2, top // 16 * 16 - 1)
    assert seen["wide"] == [False, True, True, True, True]


@pytest.mark.parametrize("expr, want", [
    ("8*Mod(t, 32) + 256*floor(t/32)", (0, 1016)),
    ("floor((t + 3)/4)", (0, 32)),
    ("ceiling(t/8)", (0, 16)),
    ("t*(t - 1)", (-127, 16002)),
    ("Mod(t + 128, 64)", (0, 63)),
    ("Mod(t, 256)", (0, 127)),
])
def test_interval_of_thread_expressions(expr, want):
    t = sympy.Symbol("t", integer=True, nonnegative=True)
    assert interval(sympy.sympify(expr, locals={"t": t}), {t: (0, 127)}.get) == want


def test_interval_of_an_unbounded_symbol_is_open():
    t = sympy.Symbol("t", integer=True, nonnegative=True)
    M = symbol("M", 16)
    assert interval(4 * t + 1, {t: (0, None)}.get) == (1, None)
    assert interval(t - M, {}.get) == (None, None)
