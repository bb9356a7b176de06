"""Hidden kernel parameters (tensor maps, error buffers the DSL adds)."""
import layoutkit.dsl as lk
from layoutkit.dsl.core.tracer import current
from layoutkit.dsl.core.types import tensormap
from layoutkit.ptx import ParamSpec


def make_kernel(seen):
    @lk.kernel(num_warps=1)
    def k(x: lk.Pointer[lk.f32], n: lk.i32, B: lk.constexpr):
        trace = current()
        first = trace.hidden_param("tmap_x", tensormap, lambda args: seen.append(args) or "TM",
                                   "tensor map of x")
        again = trace.hidden_param("tmap_x", tensormap, None, "ignored")
        assert first is again
    return k


def test_hidden_tensormap_param_is_declared_last_and_resolved_from_arguments():
    seen = []
    k = make_kernel(seen)
    spec = k.specialize(lk.Pointer[lk.f32], 100, 8)
    assert ".param .align 64 .b8 tmap_x[128]" in spec.ptx
    assert [s.describe() for s in spec.param_specs()][-1] == ParamSpec.tensormap(
        "tmap_x").describe()
    assert [op.attrs["name"] for op in spec.ir.hidden] == ["tmap_x"]
    assert spec.hidden_values(("ptr", 100, 8)) == ["TM"]
    assert seen == [("ptr", 100, 8)]
    assert "tmap_x" in str(spec.ir)
