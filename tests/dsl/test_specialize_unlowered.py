"""Kernel.specialize_unlowered: traced, verified and checked now, lowered to PTX only when the PTX
is first asked for (what the CPU interpreter runs); specialize() of the same key lowers it."""
import layoutkit.dsl as lk

from . import spec_cache_kernels as K

P = lk.TensorSpec(lk.f32, (4096,))


def test_lowering_waits_for_the_ptx_and_specialize_forces_it():
    kernel = lk.kernel(K.axpy_body, num_warps=4)
    spec = kernel.specialize_unlowered(P, P, 4096, 2.0, BLOCK=256)
    assert spec._ptx is None and "lower" not in spec.timings and "trace" in spec.timings
    assert spec.ir.body.ops                                 # the IR is all there is
    again = kernel.specialize(P, P, 4096, 2.0, BLOCK=256)   # the same key: lowered now
    assert again is spec and spec._ptx is not None and "lower" in spec.timings
    assert spec.ptx == lk.kernel(K.axpy_body, num_warps=4).specialize(
        P, P, 4096, 2.0, BLOCK=256).ptx


def test_the_ptx_property_lowers_once():
    kernel = lk.kernel(K.axpy_body, num_warps=4)
    spec = kernel.specialize_unlowered(P, P, 1000, 2.0, BLOCK=512)
    text = spec.ptx
    assert ".entry" in text and spec.ptx is text
