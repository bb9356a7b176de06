"""do_not_specialize (layoutkit.dsl.core.nospec) and kernel.specializations(): one cubin for every
value of a named fact, the same key on the checked and the fast launch path, correct results
for the values the specialized kernel would have had cubins of its own for, and every misuse
named."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import layoutkit.dsl as lk
from layoutkit.dsl.interpreter import interpret

from . import spec_cache_kernels as K
from .fake_gpu import BASE, FakeGPU, Tensor


def spec(n: int) -> lk.TensorSpec:
    return lk.TensorSpec(lk.f32, (n,))


def test_an_integer_named_keeps_only_its_sign():
    T = spec(8192)
    keys = {K.axpy_any_n.key(T, T, n, 2.0, 512) for n in (1, 16, 33, 4096)}
    assert len(keys) == 1 and next(iter(keys))[2] == "+"
    assert K.axpy_any_n.key(T, T, 0, 2.0, 512)[2] == "" == K.axpy_any_n.key(T, T, -3, 2.0, 512)[2]
    assert len({K.axpy.key(T, T, n, 2.0, 512) for n in (1, 16, 33)}) == 3   # as before


def test_one_ptx_for_every_size_and_tensor_extents_named():
    ptx = {K.axpy_any_size.ptx(spec(m), spec(m2), n, 2.0, BLOCK=512)
           for m, m2, n in ((4096, 4096, 4096), (4095, 1000, 7), (16, 1, 1))}
    assert len(ptx) == 1
    strided = lk.TensorSpec(lk.f32, (4096,), strides=(2,))
    assert K.axpy_any_size.key(strided, spec(16), 16, 2.0, 512)[0] == (True, True, "+", "+")
    assert K.axpy_any_size.key(spec(4096), spec(4096), 16, 2.0, 512)[:3] == \
        ((True, True, "+", "1"), (True, True, "+", "1"), "+")


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 1500), seed=st.integers(0, 2**31 - 1))
def test_the_relaxed_kernel_computes_what_numpy_does(n, seed):
    """On the interpreter, for n a multiple of 16, 1 or ragged: the one kernel is right."""
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(1536).astype(np.float32), rng.standard_normal(1536).astype(np.float32)
    want = y.astype(np.float64).copy()
    want[:n] += 1.5 * x[:n].astype(np.float64)
    interpret(K.axpy_any_size, 3, x, y, n, 1.5, BLOCK=512)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


@pytest.fixture
def gpu(monkeypatch):
    fake = FakeGPU(monkeypatch, [K.axpy_any_size, K.axpy])
    yield fake
    fake.reset()


def test_the_fast_path_computes_the_relaxed_key(gpu):
    x = Tensor(BASE, shape=(8192,))
    y = Tensor(BASE + (1 << 20), shape=(8192,))
    launch = K.axpy_any_size[16]
    for n in (16, 1, 8191, 4096, 33):
        launch(x, y, n, 2.0, BLOCK=512)
    assert len(K.axpy_any_size._cache) == 1 and len(gpu.calls) == 5
    fast = K.axpy_any_size._fast
    assert len(fast.launchers) == 1                # all but the first took the fast path
    for n in (16, 1, 33):
        K.axpy[16](x, y, n, 2.0, BLOCK=512)
    assert len(K.axpy._cache) == 3


@pytest.mark.parametrize("names, message", [
    (("n_stride0",), "'n_stride0', which is no parameter of the kernel"),
    (("x_stride0",), "'x_stride0', a tensor stride: strides keep specializing"),
    (("a",), "'a', a f32 parameter, which is never specialized"),
    (("BLOCK",), "'BLOCK', a constexpr: its value is the kernel"),
    (("nope",), "'nope', which is no parameter of the kernel"),
    ((3,), "do_not_specialize holds 3; give parameter names"),
])
def test_a_name_that_cannot_be_relaxed_is_refused(names, message):
    with pytest.raises(lk.KernelDefinitionError) as info:
        lk.kernel(K.axpy_body, num_warps=4, do_not_specialize=names)
    assert message in info.value.message
    if not isinstance(names[0], int):
        assert info.value.message.endswith("it takes integer parameters, Tensor parameters (all "
                                           "their extents) and single extents: x, x_shape0, y, "
                                           "y_shape0, n")


def test_a_pointer_is_refused_and_a_single_string_is_one_name():
    @lk.kernel(num_warps=1, do_not_specialize="n")
    def k(p: lk.Pointer[lk.f32], n: lk.i32):
        pass
    assert k.do_not_specialize == ("n",)
    with pytest.raises(lk.KernelDefinitionError, match="'p', a Pointer: its only fact is its "
                                                        "16-byte alignment"):
        lk.kernel(k.fn, num_warps=1, do_not_specialize=("p",))


def test_names_are_normalized():
    k = lk.kernel(K.axpy_body, num_warps=4, do_not_specialize=("y_shape0", "x", "n"))
    assert k.do_not_specialize == ("x", "y", "n")        # y has one mode: the whole tensor


def test_specializations_lists_the_facts_of_each():
    k = lk.kernel(K.axpy_body, num_warps=4, do_not_specialize=("n",))
    k.specialize(spec(4096), spec(4096), 1, 2.0, BLOCK=512)
    k.specialize(lk.TensorSpec(lk.f32, (4095,), strides=(2,), aligned=False), spec(4096), 16,
                 2.0, BLOCK=256)
    k.specialize(spec(4096), spec(4096), 0, 2.0, BLOCK=512)
    table = k.specializations()
    assert [row.source for row in table] == ["traced"] * 3
    assert table[1].facts == {"x": "(+):(+) unaligned", "y": "(16):(1)", "n": ">0", "a": "-",
                              "BLOCK": "256"}
    assert str(table) == "\n".join([
        "axpy_body: 3 specializations",
        "#  x                  y         n (nospec)  a  BLOCK  options  from",
        "0  (16):(1)           (16):(1)  >0          -  512    sm_90a   traced",
        "1  (+):(+) unaligned  (16):(1)  >0          -  256    sm_90a   traced",
        "2  (16):(1)           (16):(1)  any         -  512    sm_90a   traced"])


def test_an_empty_table():
    k = lk.kernel(K.axpy_body, num_warps=4)
    assert str(k.specializations()).splitlines()[0] == "axpy_body: 0 specializations"
