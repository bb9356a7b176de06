"""wgmma on the CPU interpreter: every canonical shared-operand form read through its matrix
descriptor, SS and RS products and a TMA-fed warp-specialized ring against numpy, and the
misuses (a stage released before the wgmma finished, an accumulator read before its wait, no
fence, accumulating into undefined registers) as errors at their source lines."""
import copy
import dataclasses
import warnings

import numpy as np
import pytest

from layoutkit.algebra import ComposedLayout, Layout, Swizzle
from layoutkit.dsl.interpreter import (ExecutionError, RaceError, from_bf16, interpret, run_ir,
                                       to_bf16)
from layoutkit.dsl.interpreter.wgmma_math import fragment
from layoutkit.dsl.sm90.wgmma.layouts import wgmma_accumulator_layout

from .. import source_lines
from ..wgmma_kernels import attention_tile, ss_gemm
from . import hopper_kernels
from .hopper_kernels import ring_gemm, wgmma_forms

FORMS = {   # 64 x K bf16 tiles in each canonical form: (layout, K)
    "K none": (Layout(((8, 8), (8, 2)), ((8, 128), (1, 64))), 16),
    "K 32B": (ComposedLayout(Swizzle(1, 3, 3), 0, Layout((64, 16), (16, 1))), 16),
    "K 64B": (ComposedLayout(Swizzle(2, 3, 3), 0, Layout((64, 32), (32, 1))), 32),
    "K 128B": (ComposedLayout(Swizzle(3, 3, 3), 0, Layout((64, 64), (64, 1))), 64),
    "MN none": (Layout(((8, 8), (8, 2)), ((1, 64), (8, 512))), 16),
    "MN 32B": (ComposedLayout(Swizzle(1, 3, 3), 0, Layout(((16, 4), 16), ((1, 256), 16))), 16),
    "MN 64B": (ComposedLayout(Swizzle(2, 3, 3), 0, Layout(((32, 2), 16), ((1, 512), 32))), 16),
    "MN 128B": (ComposedLayout(Swizzle(3, 3, 3), 0, Layout((64, 16), (1, 64))), 16),
}


def bf16_matrix(rng, shape):
    return to_bf16(rng.standard_normal(shape))


def product(a, b_t):
    return from_bf16(a).astype(np.float64) @ from_bf16(b_t).astype(np.float64).T


def relative(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_fragment_is_the_dsl_accumulator_layout():
    rows, cols = fragment(128, 64)
    layout = wgmma_accumulator_layout(64, 128)
    for t in range(0, 128, 7):
        for v in range(layout.num_values):
            index = layout.layout(t, v)
            assert (rows[t, v], cols[t, v]) == (index % 128, index // 128)


@pytest.mark.parametrize("form", list(FORMS))
def test_every_canonical_operand_form_is_read_through_its_descriptor(form):
    layout, k = FORMS[form]
    rng = np.random.default_rng(len(form))
    a, b = bf16_matrix(rng, (64, k)), bf16_matrix(rng, (64, k))
    c = np.zeros((64, 64), np.float32)
    interpret(wgmma_forms, 1, a, b, c, layout, layout, k)
    assert relative(c, product(a, b)) < 1e-6


@pytest.mark.parametrize("m, n, k, major", [(64, 64, 128, "K"), (128, 64, 64, "K"),
                                            (64, 128, 64, "N")])
def test_ss_gemm_matches_numpy(m, n, k, major):
    rng = np.random.default_rng(m + n + k)
    a = bf16_matrix(rng, (m, k))
    b = bf16_matrix(rng, (n, k) if major == "K" else (k, n))
    c = np.zeros((m, n), np.float32)
    interpret(ss_gemm, 1, a, b, c, k, m, n, major, seed=1)
    assert relative(c, product(a, b if major == "K" else b.T.copy())) < 1e-6


@pytest.mark.parametrize("n", [64, 128])
def test_register_a_operand_chains_a_converted_accumulator(n):
    rng = np.random.default_rng(n)
    q, k, v = bf16_matrix(rng, (64, 64)), bf16_matrix(rng, (n, 64)), bf16_matrix(rng, (n, 64))
    s, o = np.zeros((64, n), np.float32), np.zeros((64, 64), np.float32)
    interpret(attention_tile, 1, q, k, v, s, o, n)
    assert relative(s, product(q, k)) < 1e-6
    assert relative(o, product(to_bf16(s), v.T.copy())) < 1e-6


@pytest.mark.parametrize("stages", [1, 2])
def test_tma_fed_ring_matches_numpy(stages):
    rng = np.random.default_rng(stages)
    a, b = bf16_matrix(rng, (64, 256)), bf16_matrix(rng, (64, 256))
    c = np.zeros((64, 64), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        interpret(ring_gemm, 1, a, b, c, 256, 64, stages, False, seed=stages)
    assert relative(c, product(a, b)) < 1e-6


@pytest.mark.parametrize("stages", [1, 2])
def test_releasing_a_stage_before_the_wgmma_finished_is_a_race(stages):
    rng = np.random.default_rng(5)
    a, b = bf16_matrix(rng, (64, 256)), bf16_matrix(rng, (64, 256))
    lines = {source_lines.line_of(hopper_kernels.__file__, "lk.sm90.tma_load(sA[:, :, p.stage]"),
             source_lines.line_of(hopper_kernels.__file__, "acc = lk.sm90.wgmma(acc, sA")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in range(3):
            with pytest.raises(RaceError, match="wgmma") as info:
                interpret(ring_gemm, 1, a, b, np.zeros((64, 64), np.float32), 256, 64, stages,
                          True, seed=seed)
            assert info.value.location.line in lines


def edited(kernel, args, drop: str = "", edit=None):
    """A copy of the kernel's IR (top-level ops, which these kernels have only) without the
    ops named `drop`, each op's attrs copied and passed to `edit(op)` (deepcopy cannot copy
    the layouts in attrs; the traced IR is cached and must stay intact)."""
    fn = copy.copy(kernel.ir(*args))
    ops = [dataclasses.replace(op, attrs=dict(op.attrs)) for op in fn.body.ops
           if op.name != drop]
    for op in ops:
        if edit is not None:
            edit(op)
    fn.body = dataclasses.replace(fn.body, ops=ops)
    return fn


def attention_args(n: int = 64):
    rng = np.random.default_rng(9)
    return (bf16_matrix(rng, (64, 64)), bf16_matrix(rng, (n, 64)), bf16_matrix(rng, (n, 64)),
            np.zeros((64, n), np.float32), np.zeros((64, 64), np.float32), n)


def test_reading_the_accumulator_before_its_wait_is_a_race_at_the_read():
    args = attention_args()
    fn = edited(attention_tile, args, drop="wgmma_wait")     # tracing refuses this kernel
    store = next(op for op in fn.body.ops if op.name == "store")
    with pytest.raises(RaceError, match="before an lk.sm90.wgmma_wait covers its group") as info:
        run_ir(fn, 1, args)
    assert info.value.location.line == store.location.line


def test_a_first_wgmma_without_a_fence_is_an_error():
    args = attention_args()
    fn = edited(attention_tile, args, drop="wgmma_fence")
    with pytest.raises(ExecutionError, match="no lk.sm90.wgmma_fence"):
        run_ir(fn, 1, args)


def test_accumulating_into_an_undefined_accumulator_is_an_error():
    args = attention_args()
    first = []

    def accumulate_first(op):
        if op.name == "wgmma" and not first:
            op.attrs["accumulate"] = True
            first.append(op)
    fn = edited(attention_tile, args, edit=accumulate_first)
    with pytest.raises(ExecutionError, match="accumulator with undefined values"):
        run_ir(fn, 1, args)
