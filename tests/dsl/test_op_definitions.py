"""One definition per op: every IR op is one OpDef with all four facets, names are unique, and a
kernel's target bounds the ops it may use."""
import pytest

import layoutkit as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.core.opdef import (FACETS, REGISTRY, SM80, SM90A, NoEffects, OpDef,
                                      OpDefinitionError, definition)


# Facets that no kernel can run, and why.
NEVER_RUN = {("param", "interpret"): "parameters are bound by the launch, not run as steps",
             ("param", "effects"): "parameters are outside the body the protocol check walks"}


def test_every_op_facet_runs_somewhere_in_the_suite(request):
    """Every facet of every op ran in some test of this run (conftest.py counts the calls and
    runs this test last): an op whose lowering, interpretation, effects or verifier no test
    reaches fails here, naming it."""
    from conftest import FULL_SUITE
    from layoutkit.dsl.core.opdef import FACET_CALLS
    if not request.config.stash.get(FULL_SUITE, False):
        pytest.skip("checks the facet calls of the whole suite: runs only in a full "
                    "`python3 -m pytest` (no paths, -k or -m)")
    if hasattr(request.config, "workerinput"):
        pytest.skip("under pytest-xdist a worker sees only its own tests' facet calls: the "
                    "controller checks the union of the workers' counts when the run ends "
                    "(conftest.py)")
    missing = missing_facets(FACET_CALLS)
    assert not missing, f"no test ran these facets: {', '.join(missing)}"


def missing_facets(calls: dict) -> list[str]:
    """'op.facet' of every facet with no count in calls ({(op name, facet): calls}), but those
    NEVER_RUN lists."""
    return [f"{name}.{facet}" for name in sorted(REGISTRY) for facet in FACETS
            if (name, facet) not in NEVER_RUN and not calls.get((name, facet))]


def test_the_facet_counter_counts():
    from layoutkit.dsl.core.opdef import FACET_CALLS
    before = FACET_CALLS.get(("binary", "lower"), 0)
    lk.kernel(num_warps=4)(_axpb()).ptx(lk.Pointer[lk.f32], 1024)
    assert FACET_CALLS.get(("binary", "lower"), 0) > before


def test_every_registered_op_defines_every_facet():
    assert len(REGISTRY) >= 12
    for name, defn in REGISTRY.items():
        assert defn.name == name and isinstance(defn, OpDef)
        for facet in FACETS:
            method = getattr(type(defn), facet)
            assert getattr(method, "__wrapped__", method) is not getattr(OpDef, facet), (name,
                                                                                   facet)
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


def test_a_specialization_traced_with_the_check_skipped_is_checked_when_used_outside():
    """lk.protocol_check_skipped() is for tests of single ops: what it traced is not served
    unchecked to a later call outside it."""
    @lk.kernel(num_warps=4)
    def reads_garbage(x: lk.Pointer[lk.f32]):      # reads shared memory nothing wrote
        s = lk.shared_tensor(Layout(128), lk.f32)
        lk.barrier()
        tv = lk.tv_layout(Layout(128), Layout(1))
        lk.store(lk.global_tensor(x, Layout(128)).partition(tv), lk.load(s.partition(tv)))
    with lk.protocol_check_skipped():
        reads_garbage.ptx(lk.Pointer[lk.f32])
    with pytest.raises(lk.ProtocolError, match="nothing in the kernel writes"):
        reads_garbage.ptx(lk.Pointer[lk.f32])
