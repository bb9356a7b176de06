"""One definition per op: every IR op is one OpDef with all four facets, names are unique, and a
kernel's target bounds the ops it may use."""
import pytest

import layoutkit as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.core.opdef import (FACETS, REGISTRY, SM80, SM90A, NoEffects, OpDef,
                                      OpDefinitionError, definition)


def test_every_registered_op_defines_every_facet():
    assert len(REGISTRY) >= 12
    for name, defn in REGISTRY.items():
        assert defn.name == name and isinstance(defn, OpDef)
        for facet in FACETS:
            assert getattr(type(defn), facet) is not getattr(OpDef, facet), (name, facet)
        assert defn.targets and defn.targets <= {SM80, SM90A}, name


def test_an_op_missing_a_facet_is_refused_where_it_is_defined():
    with pytest.raises(OpDefinitionError, match=r"IR op 'test_half' \(class Half\) lacks the "
                       r"facet interpret\(op, compiler\)"):
        class Half(NoEffects, OpDef):
            name = "test_half"

            def verify(self, op):
                pass

            def lower(self, op, lw):
                pass
    assert "test_half" not in REGISTRY


def test_a_name_defined_twice_is_refused():
    with pytest.raises(OpDefinitionError, match="IR op 'binary' is defined twice: by Binary and "):
        class Again(NoEffects, OpDef):
            name = "binary"

            def verify(self, op):
                pass

            def lower(self, op, lw):
                pass

            def interpret(self, op, compiler):
                pass
    assert type(REGISTRY["binary"]).__name__ == "Binary"


def test_targets_must_be_known():
    with pytest.raises(OpDefinitionError, match=r"targets \['sm_75'\] must be a non-empty subset"):
        class Old(NoEffects, OpDef):
            name = "test_old"
            targets = frozenset({"sm_75"})

            def verify(self, op):
                pass

            def lower(self, op, lw):
                pass

            def interpret(self, op, compiler):
                pass


def test_an_unknown_op_name_is_an_error_not_a_silent_skip():
    with pytest.raises(OpDefinitionError, match="no IR op is named 'stmatrix_typo'"):
        definition("stmatrix_typo")


def _axpb():
    def axpb(x: lk.Pointer[lk.f32], n: lk.i32):
        tv = lk.tv_layout(Layout(128), Layout(4))
        X = lk.global_tensor(x, Layout(n)).tile((512,), (lk.block_id(0),)).partition(tv)
        lk.store(X, lk.load(X) * 2.0 + 1.0)
    return axpb


def test_the_target_is_the_ptx_target_and_part_of_the_key():
    k80 = lk.kernel(num_warps=4, target="sm_80")(_axpb())
    k90 = lk.kernel(num_warps=4)(_axpb())
    assert ".target sm_80\n" in k80.ptx(lk.Pointer[lk.f32], 4096)
    assert ".target sm_90a\n" in k90.ptx(lk.Pointer[lk.f32], 4096)
    assert k80.key(lk.Pointer[lk.f32], 4096)[-1].target == "sm_80"
    assert k90.key(lk.Pointer[lk.f32], 4096)[-1].target == "sm_90a"


@pytest.mark.parametrize("target, rule", [
    ("sm_100a", "must be one of 'sm_90a', 'sm_80'"), (90, "must be one of 'sm_90a', 'sm_80'")])
def test_a_bad_target_names_the_choices(target, rule):
    with pytest.raises(lk.KernelDefinitionError, match=f"target={target!r} {rule}"):
        lk.kernel(target=target)(_axpb())


def test_clusters_need_the_hopper_target():
    with pytest.raises(lk.KernelDefinitionError, match=r"cluster=\(2, 1, 1\) needs target "
                       r"'sm_90a' \(thread-block clusters are sm_90\); its target is 'sm_80'"):
        lk.kernel(target="sm_80", cluster=(2, 1, 1))(_axpb())
