"""The interpreter's fast paths give what its general forms give, bit for bit: the bf16 rounding
of a float32 register, bf16 and fp8 encode/decode of an access's values, index expressions
wrapped once at the ring's edges, the scheduler's draws, wgmma operand byte runs, the claim
counts that spare check_claims its scan."""
import random
from types import SimpleNamespace

import numpy as np
import pytest
import sympy
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from layoutkit.dsl.core.types import DTYPES, bf16
from layoutkit.dsl.interpreter import RaceError, float8, memory, numerics as N
from layoutkit.dsl.interpreter.index_eval import compile_index
from layoutkit.dsl.interpreter.scheduler import _below
from layoutkit.dsl.interpreter.wgmma_math import byte_runs

bits32 = st.integers(0, 2 ** 32 - 1)


def f32_of(bits: int) -> np.float32:
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


def same_bits(x, y) -> bool:
    return type(x) is type(y) and np.asarray(x).tobytes() == np.asarray(y).tobytes()


@settings(max_examples=400, deadline=None)
@given(bits32)
def test_a_float32_register_cast_to_bf16_rounds_as_the_general_path(bits):
    x = f32_of(bits)
    if np.isfinite(x):
        assert same_bits(N.cast(x, N.F32, N.BF16), N._round_pair(float(x), 0.0, N.BF16))


def test_signed_zeros_and_exact_zeros_take_the_general_paths_signs():
    # binary's f32 max/min of two zeros, fma's exact zero results: what the general paths give
    zeros = [np.float32(0.0), np.float32(-0.0)]
    for a in zeros:
        for b in zeros:
            either_plus = not (np.signbit(a) and np.signbit(b))
            assert same_bits(N.binary("max", a, b, N.F32),
                             np.float32(0.0 if either_plus else -0.0))
            either_minus = bool(np.signbit(a) or np.signbit(b))
            assert same_bits(N.binary("min", a, b, N.F32),
                             np.float32(-0.0 if either_minus else 0.0))
            for c in zeros:
                want = N._round_pair(float(a) * float(b) + float(c), 0.0, N.F32)
                assert same_bits(N.fma(a, b, c, N.F32), want)
    assert same_bits(N.fma(np.float32(3.0), np.float32(-2.0), np.float32(6.0), N.F32),
                     np.float32(0.0))                       # x - x: +0 in round to nearest


def test_a_negative_float32_that_rounds_to_zero_in_bf16_gives_plus_zero_as_the_general_path():
    for x in (np.float32(-1e-45), np.float32(-2.0 ** -134)):
        assert same_bits(N.cast(x, N.F32, N.BF16), N._round_pair(float(x), 0.0, N.BF16))
        assert np.signbit(N.cast(x, N.F32, N.BF16)) == np.signbit(
            N._round_pair(float(x), 0.0, N.BF16))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(bits32.map(f32_of), st.floats(width=64)), min_size=1, max_size=8))
def test_bf16_encode_of_few_values_matches_the_array_form(values):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # numpy's overflow of a value past float32
        want = N.bf16_from_f32_bits(np.array(values, dtype=np.float32).view(np.uint32))
    got = memory.encode(values, bf16)
    assert got.dtype == np.uint8 and got.flags.writeable
    assert got.tobytes() == want.view(np.uint8).tobytes()


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=2, max_size=16).filter(lambda b: len(b) % 2 == 0))
def test_bf16_decode_is_the_high_half_of_a_float32(raw):
    got = memory.decode(np.frombuffer(raw, dtype=np.uint8).copy(), bf16)
    halves = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
    assert all(type(v) is np.float32 for v in got)
    assert np.array(got, dtype=np.float32).view(np.uint32).tolist() == halves.tolist()


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.floats(-N._F32_MAX, N._F32_MAX), st.sampled_from([np.inf, -np.inf])))
def test_a_float32_made_by_multiplying_one_is_the_float32_nearest_the_float(x):
    # numerics builds f32 results within the float32 range (and infinities) as _ONE32 * x
    assert same_bits(N._ONE32 * x, np.float32(x))
    assert same_bits(N.round_float(x, N.F32), np.float32(x))
    assert same_bits(N.to_dtype(x, N.F32), np.float32(x))


FP8 = ("e4m3", "e5m2")


@pytest.mark.parametrize("fmt", FP8)
def test_fp8_decode_and_encode_of_every_bit_pattern_match_the_array_forms(fmt):
    raw = np.arange(256, dtype=np.uint8)
    got = memory.decode(raw, DTYPES[fmt])
    assert all(type(v) is np.float32 for v in got)
    assert np.array(got).tobytes() == float8.from_bits(raw, fmt).tobytes()
    finite = [v for v in got if not np.isnan(v)]            # a NaN encodes as NAN_BITS
    encoded = memory.encode(finite, DTYPES[fmt])
    assert encoded.dtype == np.uint8 and encoded.flags.writeable
    assert encoded.tobytes() == float8.to_bits(np.array(finite, dtype=np.float64), fmt).tobytes()
    assert encoded.tolist() == [c for c in range(256) if not np.isnan(got[c])]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(FP8), st.lists(st.one_of(
    st.integers(0, 255).map(lambda c: c),                   # an fp8 value (its pattern)
    st.floats(width=32), st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan])),
    min_size=1, max_size=16))
def test_fp8_encode_of_few_values_matches_the_array_form(fmt, picks):
    values = [memory._FP8_SCALARS[fmt][p] if isinstance(p, int) else np.float32(p)
              for p in picks]
    try:
        want = float8.to_bits(np.array(values, dtype=np.float64), fmt).tobytes()
    except ValueError as exc:                               # a value the format cannot hold
        with pytest.raises(ValueError) as refused:
            memory.encode(values, DTYPES[fmt])
        assert str(refused.value) == str(exc)
        return
    assert memory.encode(values, DTYPES[fmt]).tobytes() == want


CLAIMS = st.lists(st.tuples(st.integers(0, 240), st.integers(1, 16), st.booleans()), max_size=30)


@settings(max_examples=150, deadline=None)
@given(CLAIMS, st.sets(st.integers(0, 29)),
       st.tuples(st.integers(0, 240), st.integers(1, 16), st.booleans()))
def test_check_claims_refuses_what_a_scan_of_the_open_claims_refuses(claims, released, access):
    # past a few open claims check_claims tests per-byte claim counts before scanning; the
    # first open claim it conflicts with, in the order made, is the one it names
    shared = memory.SharedMemory(SimpleNamespace(shared_bytes=256, shared=()))
    made = [shared.claim(s, n, w, f"claim <{i}>", "advice") for i, (s, n, w) in
            enumerate(claims)]
    for i in sorted(released):
        if i < len(made):
            shared.release(made[i])
    start, nbytes, writes = access
    want = next((c for i, c in enumerate(made) if i not in released and c.start < start + nbytes
                 and start < c.end and (c.writes or writes)), None)
    op = SimpleNamespace(location=None)
    if want is None:
        shared.check_claims(start, nbytes, writes, "the access", op)
    else:
        with pytest.raises(RaceError, match=f"which {want.owner} still"):
            shared.check_claims(start, nbytes, writes, "the access", op)
    assert list(shared.claims) == [c for i, c in enumerate(made) if i not in released]


SYMS = sympy.symbols("a b c", integer=True)


def wrapped_everywhere(expr, values: dict, bits: int) -> int:
    """The value with a wrap after every sum, product, constant and symbol (what the lowering's
    registers hold at each step)."""
    def wrap(v):
        return N.wrap(v, N.I32 if bits == 32 else N.I64)

    def ev(e):
        if e.is_Integer:
            return wrap(int(e))
        if isinstance(e, sympy.Symbol):
            return wrap(values[e])
        if isinstance(e, sympy.Add):
            return wrap(sum(ev(x) for x in e.args))
        if isinstance(e, sympy.Mul):
            out = 1
            for x in e.args:
                out = wrap(out * ev(x))
            return out
        if isinstance(e, sympy.floor):                     # floor(p / d), d a positive constant
            num, den = sympy.fraction(sympy.together(e.args[0]))
            return ev(num) // int(den)
        if isinstance(e, sympy.Mod):
            return ev(e.args[0]) % int(e.args[1])
        if isinstance(e, (sympy.Min, sympy.Max)):
            return (min if isinstance(e, sympy.Min) else max)(ev(x) for x in e.args)
        raise AssertionError(e)
    return ev(expr)


def expressions(depth: int = 3):
    leaf = st.one_of(st.sampled_from(SYMS), st.integers(-2 ** 33, 2 ** 33).map(sympy.Integer))
    if depth == 0:
        return leaf
    sub = expressions(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(sub, sub).map(lambda p: p[0] + p[1]),
        st.tuples(sub, sub).map(lambda p: p[0] * p[1]),
        st.tuples(sub, st.sampled_from([2, 3, 32, 64])).map(lambda p: sympy.floor(p[0] / p[1])),
        st.tuples(sub, st.sampled_from([2, 7, 64])).map(lambda p: sympy.Mod(p[0], p[1])),
        st.tuples(sub, sub).map(lambda p: sympy.Min(p[0], p[1])),
        st.tuples(sub, sub).map(lambda p: sympy.Max(p[0], p[1])))


@settings(max_examples=60, deadline=None)
@given(expressions(2), st.sampled_from([32, 64]),
       st.lists(st.integers(-2 ** 63, 2 ** 63 - 1), min_size=3, max_size=3))
def test_index_expressions_wrapped_once_per_ring_edge_equal_a_wrap_at_every_step(expr, bits,
                                                                                 values):
    assume(not expr.has(sympy.Pow))                # a product of a symbol with itself: no index
    values = [N.wrap(v, N.I32 if bits == 32 else N.I64) for v in values]
    got = compile_index(expr, SYMS, bits)(*values)
    assert got == wrapped_everywhere(expr, dict(zip(SYMS, values)), bits)


def test_the_schedulers_draws_are_randranges():
    ours, theirs = random.Random(7), random.Random(7)
    for n in list(range(1, 300)) * 20:
        assert _below(ours.getrandbits, n) == theirs.randrange(n)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 600), min_size=1, max_size=60), st.sampled_from([1, 2]))
def test_byte_runs_cover_exactly_the_elements_bytes(starts, size):
    runs = byte_runs([np.array(starts)], size)
    covered = [b for start, n in runs for b in range(start, start + n)]
    assert covered == sorted({s + i for s in starts for i in range(size)})
    assert all(a[0] + a[1] < b[0] for a, b in zip(runs, runs[1:]))      # maximal runs
