"""IR construction, printing and the verifier."""
import pytest

import layoutkit.dsl as lk
from layoutkit.dsl.core.ir import Block, Function, Op
from layoutkit.dsl.core.types import PointerType, bool_, f32, i32, i64

from .kernels import F32, axpb, row_sums


def small_function():
    fn = Function("k", 1)
    ptr = fn.new_value(PointerType(f32))
    fn.params.append(Op("param", (), (ptr,), {"name": "x", "index": 0}))
    (off,) = (fn.new_value(i64),)
    fn.body.ops.append(Op("index", (), (off,), {"expr": 0, "syms": ()}))
    return fn, ptr, off


def test_traced_ir_verifies_and_prints_regions():
    text = str(row_sums.ir(F32, F32, 64, 100))
    assert "= for " in text and "^block0(" in text and "yield" in text and "if " in text


def test_valid_hand_built_ir_passes():
    fn, ptr, off = small_function()
    (v,) = (fn.new_value(f32),)
    fn.body.ops.append(Op("load", (ptr, off), (v,), {"vec": 1, "masked": False, "disp": 0}))
    fn.body.ops.append(Op("store", (ptr, off, v), (), {"vec": 1, "masked": False, "disp": 0}))
    assert lk.verify(fn) is fn


def test_use_before_definition_is_refused():
    fn, ptr, off = small_function()
    ghost = fn.new_value(f32)
    fn.body.ops.append(Op("store", (ptr, off, ghost), (), {"vec": 1, "masked": False, "disp": 0}))
    with pytest.raises(lk.VerifierError, match="not defined before it"):
        lk.verify(fn)


def test_value_of_an_inner_block_is_invisible_outside():
    fn, ptr, off = small_function()
    cond = fn.new_value(bool_)
    fn.body.ops.append(Op("const", (), (cond,), {"value": True}))
    inner = Block()
    v = fn.new_value(f32)
    inner.ops.append(Op("load", (ptr, off), (v,), {"vec": 1, "masked": False, "disp": 0}))
    fn.body.ops.append(Op("if", (cond,), (), {}, (inner,)))
    fn.body.ops.append(Op("store", (ptr, off, v), (), {"vec": 1, "masked": False, "disp": 0}))
    with pytest.raises(lk.VerifierError, match="uses %"):
        lk.verify(fn)


def test_vector_wider_than_16_bytes_is_refused():
    fn, ptr, off = small_function()
    vals = tuple(fn.new_value(f32) for _ in range(8))
    fn.body.ops.append(Op("load", (ptr, off), vals, {"vec": 8, "masked": False, "disp": 0}))
    with pytest.raises(lk.VerifierError, match="at most 16 bytes"):
        lk.verify(fn)


def test_loop_body_must_end_in_a_yield_of_the_carried_types():
    fn, ptr, off = small_function()
    start = fn.new_value(i32)
    fn.body.ops.append(Op("const", (), (start,), {"value": 0}))
    init = fn.new_value(f32)
    fn.body.ops.append(Op("const", (), (init,), {"value": 0.0}))
    body = Block([fn.new_value(i32), fn.new_value(f32)])
    fn.body.ops.append(Op("for", (start, start, start, init), (fn.new_value(f32),), {},
                          (body,)))
    with pytest.raises(lk.VerifierError, match="ends in a yield"):
        lk.verify(fn)


def test_single_definition():
    fn, ptr, off = small_function()
    fn.body.ops.append(Op("index", (), (off,), {"expr": 0, "syms": ()}))
    with pytest.raises(lk.VerifierError, match="a second time"):
        lk.verify(fn)


def test_ir_of_axpb_has_one_shared_bounds_check():
    text = str(axpb.ir(F32, F32, 4096, 2.0, 1.0, VALUES=4))
    assert text.count("cmp") == 1 and "load %0" in text and "vec=4" in text
