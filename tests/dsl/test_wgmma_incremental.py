"""lk.sm90.wgmma_wait's accumulator check walks only the ops traced since the previous wait
(accumulators.check_traced keeps the walk per trace): at every wait of random wgmma programs
(loops carrying accumulators, lk.if_ regions, block indices first read mid-trace, which the
tracer inserts at the top of the body, errors caught inside the kernel and tracing going on),
it raises exactly what a walk of the whole IR traced so far raises, or nothing when that does."""
import importlib

from hypothesis import given, settings
from hypothesis import strategies as st

import layoutkit.dsl as lk

from .wgmma_kernels import accumulator_out as out
from .wgmma_kernels import ones_operand as tile

acc_module = importlib.import_module("layoutkit.dsl.sm90.wgmma.accumulators")
mma_module = importlib.import_module("layoutkit.dsl.sm90.wgmma.mma")

SLOTS = 2
leaf = st.one_of(
    st.just(("fence",)), st.just(("commit",)), st.tuples(st.just("wait"), st.sampled_from([0, 1])),
    st.tuples(st.just("mma"), st.integers(0, SLOTS - 1), st.sampled_from([True, False, "i"])),
    st.tuples(st.just("scale"), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("read"), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("rs"), st.integers(0, SLOTS - 1), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("fresh"), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("block_id"), st.integers(0, 2)))
program = st.recursive(
    st.lists(leaf, min_size=1, max_size=10),
    lambda inner: st.lists(st.one_of(
        leaf, st.tuples(st.just("loop"), st.integers(0, SLOTS - 1), inner),
        st.tuples(st.just("if"), st.integers(0, 2), inner)), min_size=1, max_size=6),
    max_leaves=40)


def run(statements, s, c, accs, in_loop):
    for st_ in statements:
        kind = st_[0]
        if kind == "fence":
            lk.sm90.wgmma_fence()
        elif kind == "commit":
            lk.sm90.wgmma_commit()
        elif kind == "wait":
            try:
                lk.sm90.wgmma_wait(st_[1])
            except lk.sm90.AccumulatorUseError:
                pass                                  # go on tracing: later waits check again
        elif kind == "mma":
            flag = st_[2] if st_[2] != "i" else (in_loop > 0 if in_loop is not None else True)
            accs[st_[1]] = lk.sm90.wgmma(accs[st_[1]], s, s, accumulate=flag)
        elif kind == "scale":
            accs[st_[1]] = accs[st_[1]] * 0.5
        elif kind == "read":
            lk.store(out(c), accs[st_[1]])
        elif kind == "rs":
            p = lk.cast(accs[st_[1]], lk.bf16)
            accs[st_[2]] = lk.sm90.wgmma(accs[st_[2]], p, s)
        elif kind == "block_id":
            lk.block_id(st_[1])                       # first use: inserted at the top
        elif kind == "fresh":
            accs[st_[1]] = lk.sm90.wgmma_accumulator(64)
        elif kind == "loop":
            slot, outside = st_[1], dict(accs)
            loop = lk.range(0, 2, carry=(accs[slot],))
            for i, (carried,) in loop:
                accs[slot] = carried
                run(st_[2], s, c, accs, i)
                loop.next(accs[slot])
            accs.update(outside)                      # values made inside stay inside
            (accs[slot],) = loop.results
        elif kind == "if":
            outside = dict(accs)
            with lk.if_(lk.eq(lk.block_id(st_[1]), 0)):  # first use: inserted at the top
                run(st_[2], s, c, accs, in_loop)
            accs.update(outside)


def outcome(call):
    try:
        call()
    except lk.DSLError as error:
        return error, (type(error), error.message, error.location)
    return None, None


def compare_waits(statements) -> None:
    """Trace `statements`; at each wait, the incremental check and the whole walk agree."""
    compared = []
    incremental = mma_module.check_traced

    def both(trace):
        _, whole = outcome(lambda: acc_module.check(trace.fn, frozenset(trace.open)))
        error, found = outcome(lambda: incremental(trace))
        assert found == whole
        compared.append(found)
        if error is not None:
            raise error

    def kernel(c: lk.Pointer[lk.f32]):
        s = tile()
        lk.sm90.wgmma_fence()
        run(statements, s, c, {i: lk.sm90.wgmma_accumulator(64) for i in range(SLOTS)}, None)
        lk.sm90.wgmma_commit()
        lk.sm90.wgmma_wait(0)

    mma_module.check_traced = both
    try:
        with lk.protocol_check_skipped():
            outcome(lambda: lk.Kernel(kernel, 4).ir(lk.Pointer[lk.f32]))
    finally:
        mma_module.check_traced = incremental
    assert compared                                   # the closing wait at least


@settings(max_examples=150, deadline=None)
@given(program)
def test_each_wait_raises_what_a_walk_of_the_whole_traced_ir_raises(statements):
    compare_waits(statements)


def test_a_block_index_first_read_inside_a_region_after_a_wait():
    """block_idx.y is inserted at the top of the body while the walk is inside the lk.if_ (and
    again for .z inside the loop): the walk goes on after the region, not through it again."""
    compare_waits([
        ("mma", 0, False), ("commit",), ("wait", 0),
        ("if", 0, [("fence",), ("mma", 1, False), ("commit",), ("wait", 0), ("block_id", 1),
                   ("loop", 0, [("fence",), ("mma", 0, "i"), ("commit",), ("wait", 0),
                                ("block_id", 2), ("commit",), ("wait", 0)])]),
        ("fence",), ("mma", 0, True), ("commit",), ("wait", 1), ("read", 0)])
