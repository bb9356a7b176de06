"""Specialization keys: same key -> the cached specialization; different facts -> new cubin."""
import numpy as np
import pytest

import layoutkit.dsl as lk

from .kernels import F32, axpb


def test_same_facts_hit_the_cache():
    first = axpb.specialize(F32, F32, 4096, 2.0, 1.0, VALUES=4)
    again = axpb.specialize(F32, F32, 8192, 3.0, -1.0, VALUES=4)     # also a multiple of 16
    assert again is first
    assert axpb.key(F32, F32, 4096, 2.0, 1.0, 4) == axpb.key(F32, F32, 8192, 3.0, -1.0, 4)


def test_divisibility_gives_a_different_cubin():
    div16 = axpb.specialize(F32, F32, 4096, 2.0, 1.0, VALUES=4)
    ragged = axpb.specialize(F32, F32, 4095, 2.0, 1.0, VALUES=4)
    assert div16 is not ragged and div16.key != ragged.key
    assert div16.cubin.data != ragged.cubin.data


def test_key_facts_per_argument_kind():
    aligned = np.zeros(64, np.float32)
    offset = aligned[1:] if aligned.ctypes.data % 16 == 0 else aligned[2:]
    keys = {axpb.key(p, F32, n, 1.0, 1.0, 4) for p in (aligned, offset) for n in (1, 32, 33, 0)}
    assert len(keys) == 8
    assert axpb.key(F32, F32, 1, 1.0, 1.0, 4)[2] == "1"
    assert axpb.key(F32, F32, -5, 1.0, 1.0, 4)[2] == ""


def test_constexpr_values_are_part_of_the_key():
    assert axpb.ptx(F32, F32, 4096, 2.0, 1.0, VALUES=4) != \
        axpb.ptx(F32, F32, 4096, 2.0, 1.0, VALUES=2)


def test_n_equal_to_one_is_a_constant():
    ir = str(axpb.ir(F32, F32, 1, 2.0, 1.0, VALUES=4))
    assert "index %2" not in ir          # the parameter n is never read


def test_key_is_cheap_enough_for_every_launch():
    import timeit
    per_call = min(timeit.repeat(lambda: axpb.key(F32, F32, 4096, 2.0, 1.0, 4), number=200,
                                 repeat=3)) / 200
    assert per_call < 50e-6


def test_explicit_signature_and_launch_arguments_agree():
    x = np.zeros(4096, np.float32)
    if x.ctypes.data % 16 == 0:
        assert axpb.key(x, x, 4096, 2.0, 1.0, 4) == axpb.key(F32, F32, 4096, 2.0, 1.0, 4)


def test_kernel_repr_names_its_parameters():
    assert "x: Pointer[f32]" in repr(axpb) and "VALUES: lk.constexpr" in repr(axpb)
    assert isinstance(axpb, lk.Kernel)


@pytest.mark.parametrize("bad", [[1, 2], {"a": 1}])
def test_unhashable_constexpr_is_an_error(bad):
    with pytest.raises(lk.ConstexprError, match="VALUES .* is not hashable"):
        axpb.key(F32, F32, 4096, 2.0, 1.0, bad)
