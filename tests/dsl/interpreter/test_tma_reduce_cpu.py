"""TMA reduce-stores on the CPU interpreter: several CTAs reduce-add f32 and bf16 tiles into
one ragged tensor (the last tiles clipped at its bounds, the array's elements past them
untouched), checked against float64 sums; every reduction op's arithmetic
(interpreter.tma_model.combine) against an independent model; the shared source claimed until
the store wait, as for a store."""
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import layoutkit.dsl as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.interpreter import (ExecutionError, MemoryFaultError, RaceError, from_bf16,
                                       interpret, to_bf16)
from layoutkit.dsl.interpreter.tma_model import combine, reduce_into
from layoutkit.dsl.sm90.tma.derive import reduce_dtypes
from layoutkit.ptx.isa.tma import REDUCE_TYPES

from .. import source_lines
from ..tma_reduce_kernels import as_parts, launch_shape, leading_dimension, reduce_tiles

F32 = lk.Pointer[lk.f32]


def run_reduction(dtype_name: str, values: np.ndarray, init: np.ndarray, m: int, n: int,
                  mode: str = "128B", op: str = "add", seed: int = 0) -> np.ndarray:
    """`init` (an (m + extra, LD) array) after every part of `values` (R, m, n) is reduced
    into its M x N tensor by the interpreter."""
    dtype = getattr(lk, dtype_name)
    grid, pm, pn = launch_shape(dtype, mode, m, n, values.shape[0])
    parts = as_parts(values, pm, pn)
    out = init.copy()
    interpret(reduce_tiles(dtype_name, op, mode), grid, parts, out, m, n, init.shape[1], pm,
              pn, values.shape[0], seed=seed)
    return out


def expected_sum(init64: np.ndarray, values64: np.ndarray, m: int, n: int) -> np.ndarray:
    ref = init64.copy()
    ref[:m, :n] += values64.sum(axis=0)
    return ref


@pytest.mark.parametrize("m, n, parts", [(64, 64, 2), (70, 40, 3), (129, 100, 4)])
def test_ctas_reduce_add_f32_tiles_into_one_ragged_tensor_exactly(m, n, parts):
    # multiples of 1/8 below 2**10: every partial sum is exact in f32, whatever the order the
    # CTAs' reductions land in, so the result is the float64 sum exactly
    rng = np.random.default_rng(m + n)
    ld = leading_dimension(lk.f32, n)
    values = (rng.integers(-2 ** 9, 2 ** 9, (parts, m, n)) / 8).astype(np.float32)
    init = (rng.integers(-2 ** 9, 2 ** 9, (m + 5, ld)) / 8).astype(np.float32)
    for seed in (0, 1):
        out = run_reduction("f32", values, init, m, n, seed=seed)
        ref = expected_sum(init.astype(np.float64), values.astype(np.float64), m, n)
        np.testing.assert_array_equal(out, ref)      # outside M x N: init, untouched


def test_ctas_reduce_add_random_f32_within_rounding_of_the_float64_sum():
    m, n, parts = 70, 40, 3
    rng = np.random.default_rng(7)
    values = rng.standard_normal((parts, m, n)).astype(np.float32)
    init = rng.standard_normal((m + 2, leading_dimension(lk.f32, n))).astype(np.float32)
    out = run_reduction("f32", values, init, m, n, seed=3)
    ref = expected_sum(init.astype(np.float64), values.astype(np.float64), m, n)
    # parts f32 additions, each rounded once: each error within an ulp of the sum of the
    # terms' magnitudes
    magnitude = expected_sum(np.abs(init.astype(np.float64)),
                             np.abs(values.astype(np.float64)), m, n)
    assert (np.abs(out - ref) <= parts * np.finfo(np.float32).eps * magnitude).all()
    np.testing.assert_array_equal(out[m:], init[m:])
    np.testing.assert_array_equal(out[:, n:], init[:, n:])


def test_a_tensor_larger_than_its_array_is_a_memory_fault_naming_the_reduction():
    m, n = 70, 40
    values = np.ones((1, m, n), np.float32)
    short = np.zeros((m - 10, leading_dimension(lk.f32, n)), np.float32)
    with pytest.raises(MemoryFaultError, match="the TMA reduce-add of s into out: the tensor "
                                               "map of out"):
        run_reduction("f32", values, short, m, n)


def test_an_inner_extent_inside_a_16_byte_chunk_stops_the_run():
    # bf16, 100 columns: the last 16-byte chunk of a row would be written past the extent
    values = to_bf16(np.ones((1, 64, 100)))
    init = to_bf16(np.zeros((64, leading_dimension(lk.bf16, 100))))
    with pytest.raises(ExecutionError, match="TMA writes the innermost dimension of out in "
                                             "16-byte chunks"):
        run_reduction("bf16", values, init, 64, 100)


def test_ctas_reduce_add_bf16_tiles_into_one_ragged_tensor():
    # small integers: every partial sum is exact in bf16, so any order of the CTAs' reductions
    # gives the float64 sum
    m, n, parts = 70, 136, 4
    rng = np.random.default_rng(11)
    ld = leading_dimension(lk.bf16, n)
    values = rng.integers(-8, 9, (parts, m, n)).astype(np.float32)
    init = rng.integers(-8, 9, (m + 3, ld)).astype(np.float32)
    out = run_reduction("bf16", to_bf16(values), to_bf16(init), m, n, seed=2)
    np.testing.assert_array_equal(from_bf16(out), expected_sum(init.astype(np.float64),
                                                                values.astype(np.float64), m, n))


def test_a_bf16_reduce_add_rounds_the_exact_sum_once_to_nearest_even():
    m, n = 64, 72
    rng = np.random.default_rng(12)
    values = from_bf16(to_bf16(rng.standard_normal((1, m, n))))
    init = from_bf16(to_bf16(rng.standard_normal((m + 1, leading_dimension(lk.bf16, n)))))
    out = run_reduction("bf16", to_bf16(values), to_bf16(init), m, n)
    exact = expected_sum(init.astype(np.float64), values.astype(np.float64), m, n)
    np.testing.assert_array_equal(out, to_bf16(exact))   # float64 then bf16: one rounding
    assert (from_bf16(out)[:m, :n] != exact[:m, :n]).any()      # some sums did round


def test_ctas_reduce_add_i32_tiles_wrapping():
    m, n, parts = 65, 40, 3
    rng = np.random.default_rng(13)
    ld = leading_dimension(lk.i32, n)
    values = rng.integers(-2 ** 31, 2 ** 31, (parts, m, n), dtype=np.int64)
    init = rng.integers(-2 ** 31, 2 ** 31, (m + 2, ld), dtype=np.int64)
    out = run_reduction("i32", values.astype(np.int32), init.astype(np.int32), m, n, seed=4)
    wrapped = (expected_sum(init, values, m, n) + 2 ** 31) % 2 ** 32 - 2 ** 31
    np.testing.assert_array_equal(out, wrapped.astype(np.int32))


# ---- the arithmetic of each reduction (tma_model.combine) ------------------------------------
def combined(op: str, dtype, old, new, numpy_type):
    """combine on two arrays of `numpy_type` elements, as that type."""
    old, new = np.asarray(old, numpy_type), np.asarray(new, numpy_type)
    raw = combine(op, dtype, old.view(np.uint8).reshape(old.size, -1),
                  new.view(np.uint8).reshape(new.size, -1))
    return raw.reshape(-1).view(numpy_type)


# (p significand bits, minimum normal exponent, largest finite) of each float type
FLOATS = {"f32": (24, -126, float(np.finfo(np.float32).max)),
          "f16": (11, -14, 65504.0),
          "bf16": (8, -126, float(from_bf16([0x7F7F])[0]))}


def nearest_even(x: Fraction, name: str) -> float:
    """The float of type `name` nearest to the exact rational x, ties to even (subnormals
    kept, past the largest finite value infinity): an independent model of IEEE rounding."""
    p, emin, largest = FLOATS[name]
    sign, x = (-1 if x < 0 else 1), abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1
    quantum = Fraction(2) ** (max(e, emin) - p + 1)
    whole, rest = divmod(x, quantum)
    if rest > quantum / 2 or (rest == quantum / 2 and whole % 2):
        whole += 1
    value = whole * quantum
    return sign * (math.inf if value > Fraction(largest) else float(value))


def float_bits(name: str):
    """Strategy: the bit pattern of a finite value of float type `name` (numpy view type)."""
    width, view = {"f32": (32, np.uint32), "f16": (16, np.uint16), "bf16": (16, np.uint16)}[name]
    exponent = {"f32": 0x7F800000, "f16": 0x7C00, "bf16": 0x7F80}[name]
    return st.integers(0, 2 ** width - 1).filter(lambda b: b & exponent != exponent).map(view)


def value_of(bits, name: str) -> float:
    if name == "bf16":
        return float(from_bf16([bits])[0])
    return float(np.array(bits).view(np.float32 if name == "f32" else np.float16))


def bits_of(value: float, name: str):
    if name == "bf16":
        return int(np.float32(value).view(np.uint32)) >> 16
    return int(np.array(value, np.float32 if name == "f32" else np.float16).view(
        np.uint32 if name == "f32" else np.uint16))


@pytest.mark.parametrize("name", ["f32", "f16", "bf16"])
@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_float_add_is_the_exact_sum_rounded_once_to_nearest_even(name, data):
    a, b = data.draw(float_bits(name)), data.draw(float_bits(name))
    exact = Fraction(value_of(a, name)) + Fraction(value_of(b, name))
    assume(exact != 0)                          # the sign of a zero sum: literal cases below
    view = type(a)
    (got,) = combined("add", getattr(lk, name), [a], [b], view)
    assert int(got) == bits_of(nearest_even(exact, name), name)


@pytest.mark.parametrize("name, view", [("f32", np.float32), ("f16", np.float16)])
def test_float_add_literal_cases(name, view):
    dtype = getattr(lk, name)
    big = np.finfo(view).max
    got = combined("add", dtype, [1.0, -0.0, -0.0, 2.5, big, np.nan, np.inf],
                   [2.0, -0.0, 0.0, -2.5, big, 1.0, -np.inf], view)
    np.testing.assert_array_equal(got[:5], np.array([3.0, -0.0, 0.0, 0.0, np.inf], view))
    assert np.signbit(got[1]) and not np.signbit(got[2]) and not np.signbit(got[3])
    assert np.isnan(got[5]) and np.isnan(got[6])


def test_bf16_add_ties_to_even_and_overflows_to_infinity():
    one, ulp = 0x3F80, 2.0 ** -7                       # bf16 1.0 and its ulp
    half_ulp = int(to_bf16([ulp / 2])[0])
    got = combined("add", lk.bf16, [one, 0x3F81, 0x7F7F, 0x7FC0],
                   [half_ulp, half_ulp, 0x7F7F, one], np.uint16)
    # 1 + ulp/2: a tie, to 1.0 (even); (1 + ulp) + ulp/2: a tie, to 1 + 2 ulp (even)
    assert list(got[:3]) == [one, 0x3F82, 0x7F80]
    assert got[3] == 0x7FFF                                # NaN: the canonical bf16 NaN


@pytest.mark.parametrize("name, view, nan", [("f16", np.uint16, 0x7E00),
                                             ("bf16", np.uint16, 0x7FC0)])
def test_float_min_max_take_the_non_nan_operand_and_order_zeros(name, view, nan):
    dtype = getattr(lk, name)
    pos_zero, neg_zero = 0, 0x8000
    one = bits_of(1.0, name)
    minus_two = bits_of(-2.0, name)
    old = [one, minus_two, nan, one, pos_zero, neg_zero, nan]
    new = [minus_two, one, one, nan, neg_zero, pos_zero, nan]
    assert list(combined("min", dtype, old, new, view)) == \
        [minus_two, minus_two, one, one, neg_zero, neg_zero, 0x7FFF]
    assert list(combined("max", dtype, old, new, view)) == \
        [one, one, one, one, pos_zero, pos_zero, 0x7FFF]


INTS = {"i32": np.int32, "i64": np.int64, "u32": np.uint32}


def integer(view):
    info = np.iinfo(view)
    return st.integers(int(info.min), int(info.max))


def wrapped(value: int, view) -> int:
    bits = 8 * np.dtype(view).itemsize
    value %= 2 ** bits
    return value - 2 ** bits if np.iinfo(view).min < 0 and value >= 2 ** (bits - 1) else value


def integer_reference(op: str, old: int, new: int, view) -> int:
    mask = 2 ** (8 * np.dtype(view).itemsize) - 1
    if op == "add":
        return wrapped(old + new, view)
    if op in ("min", "max"):
        return min(old, new) if op == "min" else max(old, new)
    if op in ("and", "or", "xor"):
        bits = {"and": (old & mask) & (new & mask), "or": (old & mask) | (new & mask),
                "xor": (old & mask) ^ (new & mask)}[op]
        return wrapped(bits, view)
    if op == "inc":                                       # PTX ISA: u32 only
        return 0 if old >= new else old + 1
    return new if old == 0 or old > new else old - 1     # dec


# every pair of PTX's table, enabled or not (the GPU test checks the hardware against this)
LEGAL_INTEGER = [(op, name) for op in REDUCE_TYPES for name in INTS
                 if name in reduce_dtypes(op, "ptx")]


@pytest.mark.parametrize("op, name", LEGAL_INTEGER)
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_integer_reductions_follow_the_ptx_definitions(op, name, data):
    view = INTS[name]
    small = st.integers(0, 6)                  # inc / dec: values that meet their edges
    draw = (lambda: data.draw(small | integer(view))) if op in ("inc", "dec") else \
        (lambda: data.draw(integer(view)))
    old, new = [draw() for _ in range(4)], [draw() for _ in range(4)]
    got = combined(op, getattr(lk, name), old, new, view)
    assert [int(g) for g in got] == [integer_reference(op, a, b, view)
                                     for a, b in zip(old, new)]


def test_inc_and_dec_worked_examples():
    # inc: 0 if old >= src else old + 1; dec: src if old == 0 or old > src else old - 1
    assert list(combined("inc", lk.u32, [5, 3, 2 ** 32 - 1], [5, 5, 7], np.uint32)) == [0, 4, 0]
    assert list(combined("dec", lk.u32, [0, 9, 4], [7, 7, 7], np.uint32)) == [7, 7, 3]


def test_an_address_twice_in_one_box_is_reduced_twice():
    memory = np.zeros(2, np.float32).view(np.uint8).copy()
    where = np.array([[0, 1, 2, 3], [0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3]])
    values = np.array([1.0, 2.0, 3.0, 4.0], np.float32).view(np.uint8).reshape(4, 4)
    reduce_into(memory, where, values, "add", lk.f32)
    np.testing.assert_array_equal(memory.view(np.float32), [7.0, 3.0])


# ---- the shared source, claimed until a store wait covers it ---------------------------------
@lk.kernel(num_warps=1, debug=True)
def reduce_then_overwrite(c: lk.Pointer[lk.bf16], WAIT_FIRST: lk.constexpr):
    """c (32 x 64) += 1.0 by a TMA reduce-add of a shared tile that the thread then overwrites
    with 2.0, after lk.sm90.tma_store_wait() when WAIT_FIRST, else before it."""
    tv = lk.tv_layout(Layout((32, 1), (1, 1)), Layout((1, 64), (64, 1)))     # a row each
    s = lk.shared_tensor(Layout((32, 64), (64, 1)), lk.bf16, name="s", align=128)
    C = lk.global_tensor(c, Layout((32, 64), (64, 1)))
    lk.store(s.partition(tv), lk.full(tv, 1.0, lk.bf16))
    lk.sm90.fence_proxy_async()
    lk.barrier()
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.tma_store(C.tile((32, 64), (0, 0)), s, reduce="add")
        lk.sm90.tma_store_commit()
        if WAIT_FIRST:
            lk.sm90.tma_store_wait(0)
    lk.barrier()
    lk.store(s.partition(tv), lk.full(tv, 2.0, lk.bf16))                    # the overwrite
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.tma_store_wait(0, writes=True)


def test_overwriting_a_reduction_source_before_its_wait_is_a_race():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")               # the protocol check's own finding
        c = to_bf16(np.full((32, 64), 0.5))
        interpret(reduce_then_overwrite, 1, c, True)
        np.testing.assert_array_equal(from_bf16(c), np.full((32, 64), 1.5))
        with pytest.raises(RaceError, match="which the TMA store issued at line") as info:
            interpret(reduce_then_overwrite, 1, to_bf16(np.full((32, 64), 0.5)), False)
    assert info.value.location.line == source_lines.line_of(__file__, "# the overwrite")


@lk.kernel(num_warps=1)
def reduce_then_read(c: F32, d: F32, WRITES: lk.constexpr):
    """c (32 x 32) += 1.0 by a TMA reduce-add; after lk.sm90.tma_store_wait(0, writes=WRITES)
    and a barrier every thread copies its row of c to d."""
    tv = lk.tv_layout(Layout((32, 1), (1, 1)), Layout((1, 32), (32, 1)))     # a row each
    s = lk.shared_tensor(Layout((32, 32), (32, 1)), lk.f32, name="s", align=128)
    C = lk.global_tensor(c, Layout((32, 32), (32, 1)))
    D = lk.global_tensor(d, Layout((32, 32), (32, 1)))
    lk.store(s.partition(tv), lk.full(tv, 1.0, lk.f32))
    lk.sm90.fence_proxy_async()
    lk.barrier()
    with lk.if_(lk.eq(lk.thread_id(), 0)):
        lk.sm90.tma_store(C.tile((32, 32), (0, 0)), s, reduce="add")
        lk.sm90.tma_store_commit()
        lk.sm90.tma_store_wait(0, writes=WRITES)
    lk.barrier()
    lk.store(D.partition(tv), lk.load(C.partition(tv)))


def test_a_store_wait_for_the_writes_waits_for_the_reduction():
    seen = set()
    for writes in (True, False):
        for seed in range(6):
            c, d = np.full((32, 32), 0.5, np.float32), np.zeros((32, 32), np.float32)
            interpret(reduce_then_read, 1, c, d, writes, seed=seed)
            assert (c == 1.5).all()                     # the reduction lands by the end
            if writes:
                assert (d == 1.5).all(), seed           # and before the reads after the wait
            seen.update(np.unique(d).tolist())
    assert 0.5 in seen           # without writes=True some schedules read c before it lands
