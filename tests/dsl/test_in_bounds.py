"""lk.in_bounds: the bounds mask of a global partition as a bool register tensor, built from
the same predicates as the masked loads (no extra compares), constant where provable."""
from __future__ import annotations

import re

import pytest

import layoutkit.dsl as lk
from layoutkit.algebra import Layout

F32 = lk.Pointer[lk.f32]
TV = lk.tv_layout(Layout(128), Layout(4))        # 128 threads x 4 consecutive values


@lk.kernel(num_warps=4)
def zero_past_n(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], n: lk.i32):
    """y[i] = x[i] + 1 inside n; the tile's elements past n are 0 in the stored tensor."""
    X = lk.global_tensor(x, Layout(n)).tile((512,), (lk.block_id(0),)).partition(TV)
    Y = lk.global_tensor(y, Layout(n)).tile((512,), (lk.block_id(0),)).partition(TV)
    lk.store(Y, lk.where(lk.in_bounds(X), lk.load(X) + 1.0, 0.0))


@lk.kernel(num_warps=4)
def no_bounds(x: lk.Pointer[lk.f32]):
    X = lk.global_tensor(x, Layout(512), bounds=None).partition(TV)
    lk.store(X, lk.where(lk.in_bounds(X), lk.load(X), 0.0))


@lk.kernel(num_warps=4)
def of_a_register_tensor(x: lk.Pointer[lk.f32]):
    v = lk.load(lk.global_tensor(x, Layout(512)).partition(TV))
    lk.in_bounds(v)


def test_mask_reuses_the_load_predicate():
    ptx = zero_past_n.ptx(F32, F32, 4000)     # n % 16 == 0: one 16-byte chunk
    (pred,) = re.findall(r"@(%p\d+) ld\.global\.v4\.f32", ptx)
    selects = re.findall(r"selp\.f32 %f\d+, %f\d+, 0f00000000, (%p\d+);", ptx)
    assert selects == [pred] * 4
    assert ptx.count("setp.") == 1                  # one compare for the load, store and mask


def test_provable_bounds_need_no_select():
    ptx = no_bounds.ptx(F32)
    assert "selp" not in ptx and "setp" not in ptx


def test_a_register_tensor_is_refused():
    with pytest.raises(lk.TraceError, match=r"lk\.in_bounds takes a thread's partition"):
        of_a_register_tensor.ptx(F32)
