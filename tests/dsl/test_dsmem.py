"""lk.sm90.dsmem_load / dsmem_store: a peer CTA's shared memory, ordered by the cluster barrier;
checked on the CPU interpreter against the data, in PTX (ptxas accepts it), and through each
error with its line: on the interpreter (layoutkit.dsl.interpreter.dsmem_model) and in the
static protocol check (layoutkit.sync.cluster_memory_rules)."""
import numpy as np
import pytest

import layoutkit as lk
from layoutkit.algebra import Layout
from layoutkit.dsl.check.protocol import protocol_check_skipped
from layoutkit.dsl.interpreter import interpret
from layoutkit.dsl.interpreter.errors import ExecutionError, RaceError
from layoutkit.ptx import assemble

from .source_lines import line_of

F32 = lk.Pointer[lk.f32]
N = 128
TV = lk.TVLayout((1, N), Layout((32, 4), (4, 1)))         # a warp, 4 consecutive values a lane


def L(marker: str) -> int:
    return line_of(__file__, marker)


def rotation(cluster=2, first=True, last=True, peer=lambda rank, size: (rank + 1) % size,
             pull=False, dtype=lk.f32, relaxed=(False, False)):
    """y[c] = x[peer(c)] for CTA c of a cluster of `cluster`: pushed (each CTA stores its row
    into the peer's buffer, then reads its own) or pulled (stores its own, reads the peer's),
    the cluster barriers before and after the exchange optional (`relaxed`: which of them
    is lk.sm90.cluster_sync(relaxed=True))."""
    def exchange(x: F32, y: F32):
        buf = lk.shared_tensor(Layout((1, N), (N, 1)), dtype, name="buf")
        rank = lk.sm90.block_rank_in_cluster()
        size = lk.sm90.cluster_size()
        X = lk.global_tensor(x, Layout((cluster, N), (N, 1)))
        Y = lk.global_tensor(y, Layout((cluster, N), (N, 1)))
        v = lk.cast(lk.load(X.tile((1, N), (lk.block_id(0), 0)).partition(TV)), dtype)
        if pull:
            lk.store(buf.partition(TV), v)
        if first:
            lk.sm90.cluster_sync(relaxed=relaxed[0])
        if pull:
            got = lk.sm90.dsmem_load(buf.partition(TV), cta=peer(rank, size))  # mark: pull load
        else:
            lk.sm90.dsmem_store(buf.partition(TV), v, cta=peer(rank, size))   # mark: push store
        if last:
            lk.sm90.cluster_sync(relaxed=relaxed[1])
        if not pull:
            got = lk.load(buf.partition(TV))                                  # mark: push read
        lk.store(Y.tile((1, N), (lk.block_id(0), 0)).partition(TV), lk.cast(got, lk.f32))
    return lk.kernel(exchange, num_warps=1, cluster=(cluster, 1, 1))


def run(kernel, cluster, seed=0):
    x = np.random.default_rng(seed).integers(-128, 128, cluster * N).astype(np.float32)
    y = np.full(cluster * N, np.nan, np.float32)
    interpret(kernel, cluster, x, y, seed=seed)
    return x.reshape(cluster, N), y.reshape(cluster, N)


@pytest.mark.parametrize("cluster, pull, dtype", [(2, False, lk.f32), (4, False, lk.bf16),
                                                  (3, True, lk.f32)])
def test_exchange_moves_each_row_to_its_peer(cluster, pull, dtype):
    kernel = rotation(cluster, pull=pull, dtype=dtype)
    for seed in (0, 1):
        x, y = run(kernel, cluster, seed)
        # pushed: CTA c holds what rank c - 1 stored; pulled: what it read from rank c + 1
        peers = (np.arange(cluster) + (1 if pull else -1)) % cluster
        np.testing.assert_array_equal(y, x[peers])


@pytest.mark.parametrize("pull", [False, True])
def test_ptx_maps_the_address_and_ptxas_takes_it(pull):
    ptx = rotation(2, pull=pull).ptx(F32, F32)
    assert ptx.count("mapa.shared::cluster.u32") == 1
    access = "ld.shared::cluster.v4.f32" if pull else "st.shared::cluster.v4.f32"
    assert ptx.count(access) == 1
    assert assemble(ptx).resources["exchange"].spill_store_bytes == 0


def test_a_relaxed_first_barrier_suffices_to_start():
    kernel = rotation(4, relaxed=(True, False))
    x, y = run(kernel, 4)
    np.testing.assert_array_equal(y, x[(np.arange(4) - 1) % 4])
    ptx = kernel.ptx(F32, F32)
    assert ptx.count("barrier.cluster.arrive.relaxed.aligned;") == 1
    assert ptx.count("barrier.cluster.arrive.release.aligned;") == 1


def test_a_relaxed_barrier_does_not_order_the_exchange():
    kernel = rotation(2, relaxed=(False, True))
    err = interpreter_error(kernel, 2, RaceError)
    assert "with no lk.sm90.cluster_sync() between the two" in str(err)
    kinds = {f.kind for f in static_error(kernel).findings}
    assert kinds == {"cluster race", "cluster exit"}


def test_own_rank_is_a_local_access():
    x, y = run(rotation(2, peer=lambda rank, size: rank), 2)
    np.testing.assert_array_equal(y, x)


# ---- errors: on the interpreter (the static check skipped) and in the static check ------------

def interpreter_error(kernel, cluster, error):
    with protocol_check_skipped():
        with pytest.raises(error) as info:
            run(kernel, cluster)
    return info.value


def static_error(kernel):
    with pytest.raises(lk.ProtocolError) as info:
        kernel.ptx(F32, F32)
    return info.value


def test_no_barrier_before_the_first_peer_access():
    kernel = rotation(first=False)
    err = interpreter_error(kernel, 2, ExecutionError)
    assert "before any lk.sm90.cluster_sync(): the peer CTA may not have started" in str(err)
    assert err.location.line == L("mark: push store")
    err = static_error(kernel)
    assert [f.kind for f in err.findings] == ["cluster start"]
    assert err.location.line == L("mark: push store")


def test_missing_barrier_between_the_write_and_the_read():
    kernel = rotation(last=False)
    err = interpreter_error(kernel, 2, RaceError)
    assert "with no lk.sm90.cluster_sync() between the two" in str(err)
    kinds = {f.kind for f in static_error(kernel).findings}
    assert kinds == {"cluster race", "cluster exit"}


def test_a_pulled_read_must_be_followed_by_a_barrier():
    """The owner may exit while the peer still reads (the static check; the interpreter
    reports it only where the owner's threads have all exited when the read runs)."""
    kernel = rotation(3, last=False, pull=True)
    err = static_error(kernel)
    assert [f.kind for f in err.findings] == ["cluster exit"]
    assert err.location.line == L("mark: pull load")


def test_a_pulled_read_before_the_owner_stores():
    kernel = rotation(2, first=False, pull=True)
    kinds = {f.kind for f in static_error(kernel).findings}
    assert "cluster start" in kinds and "cluster race" in kinds
    interpreter_error(kernel, 2, (ExecutionError, RaceError))


def test_wrong_cluster_rank():
    kernel = rotation(peer=lambda rank, size: rank + 1)
    err = interpreter_error(kernel, 2, ExecutionError)
    assert "names cluster rank 2, outside the cluster's 2 CTAs (ranks 0..1)" in str(err)
    assert err.location.line == L("mark: push store")
    assert "cluster rank" in {f.kind for f in static_error(kernel).findings}


def test_constant_rank_outside_the_cluster_is_a_trace_error():
    with pytest.raises(lk.TraceError, match=r"cta=2\): the peer's cluster rank is an integer "
                                            r"in 0..1"):
        rotation(peer=lambda rank, size: 2).ptx(F32, F32)


def test_buffer_not_shared():
    @lk.kernel(num_warps=1, cluster=(2, 1, 1))
    def to_global(x: F32):
        X = lk.global_tensor(x, Layout((1, N), (N, 1)))
        lk.sm90.cluster_sync()
        lk.sm90.dsmem_store(X.partition(TV), lk.full(TV, 1.0), cta=1)
    with pytest.raises(lk.TraceError, match="takes a thread's partition of a shared tensor"):
        to_global.ptx(F32)


def test_needs_a_cluster_kernel():
    @lk.kernel(num_warps=1)
    def plain(x: F32):
        buf = lk.shared_tensor(Layout((1, N), (N, 1)), lk.f32)
        lk.sm90.dsmem_store(buf.partition(TV), lk.full(TV, 1.0), cta=0)
    with pytest.raises(lk.TraceError, match="needs a cluster kernel"):
        plain.ptx(F32)


def test_layout_and_dtype_must_match():
    @lk.kernel(num_warps=1, cluster=(2, 1, 1))
    def wrong_dtype(x: F32):
        buf = lk.shared_tensor(Layout((1, N), (N, 1)), lk.f32)
        lk.sm90.cluster_sync()
        lk.sm90.dsmem_store(buf.partition(TV), lk.full(TV, 1.0, lk.bf16), cta=1)
        lk.sm90.cluster_sync()
    with pytest.raises(lk.TraceError, match="a bf16 tensor into f32 memory"):
        wrong_dtype.ptx(F32)


# ---- the asynchronous form: st.async completing on the receiver's mbarrier -------------------

def async_rotation(cluster=2, start=True, expect=True, wait=True, dtype=lk.f32):
    """y[c] = x[c - 1]: each CTA stores its row into the next one's buffer with
    lk.sm90.dsmem_store_async; the receiver expects the bytes on full[0] and waits."""
    def exchange(x: F32, y: F32):
        buf = lk.shared_tensor(Layout((1, N), (N, 1)), dtype, name="buf")
        full = lk.sm90.mbarrier_array(1, 1, name="full")
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.sm90.mbarrier_init(full)
            lk.sm90.fence_mbarrier_init()
        rank = lk.sm90.block_rank_in_cluster()
        X = lk.global_tensor(x, Layout((cluster, N), (N, 1)))
        Y = lk.global_tensor(y, Layout((cluster, N), (N, 1)))
        v = lk.cast(lk.load(X.tile((1, N), (lk.block_id(0), 0)).partition(TV)), dtype)
        if start:
            lk.sm90.cluster_sync(relaxed=True)       # peers started, their barrier initialised
        if expect:
            with lk.if_(lk.eq(lk.thread_id(), 0)):
                lk.sm90.mbarrier_expect_tx(full[0], N * 4)
        peer = (rank + 1) % cluster
        dst = buf.partition(TV)
        lk.sm90.dsmem_store_async(dst, v, cta=peer, barrier=full[0])      # mark: async store
        if wait:
            lk.sm90.mbarrier_wait(full[0], 0)
        got = lk.load(buf.partition(TV))                                  # mark: async read
        lk.store(Y.tile((1, N), (lk.block_id(0), 0)).partition(TV), lk.cast(got, lk.f32))
    return lk.kernel(exchange, num_warps=1, cluster=(cluster, 1, 1))


@pytest.mark.parametrize("cluster", [2, 4])
def test_async_exchange_moves_each_row_to_its_peer(cluster):
    kernel = async_rotation(cluster)
    for seed in (0, 1):
        x, y = run(kernel, cluster, seed)
        np.testing.assert_array_equal(y, x[(np.arange(cluster) - 1) % cluster])
    ptx = kernel.ptx(F32, F32)
    assert ptx.count("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32") == 1
    assert ptx.count("mapa.shared::cluster.u32") == 2           # the buffer and the barrier
    assert "barrier.cluster.arrive.release" not in ptx           # no cluster barrier after it
    assert assemble(ptx).resources["exchange"].spill_store_bytes == 0


def test_async_read_before_the_wait():
    kernel = async_rotation(wait=False)
    err = static_error(kernel)
    assert [f.kind for f in err.findings] == ["unwaited read"]
    assert "asynchronous peer store (lk.sm90.dsmem_store_async)" in str(err)
    assert err.location.line == L("mark: async read")
    interpreter_error(kernel, 2, RaceError)


def test_async_store_before_the_peers_started():
    kernel = async_rotation(start=False)
    assert {f.kind for f in static_error(kernel).findings} == {"init"}
    err = interpreter_error(kernel, 2, ExecutionError)
    assert "the peer CTA may not have started" in str(err)
    assert err.location.line == L("mark: async store")


def test_async_bytes_nobody_expects_deadlock():
    kernel = async_rotation(expect=False)
    assert {f.kind for f in static_error(kernel).findings} == {"deadlock"}
    from layoutkit.dsl.interpreter.errors import DeadlockError
    interpreter_error(kernel, 2, DeadlockError)


def test_async_store_takes_32_bit_values_and_a_barrier():
    with pytest.raises(lk.TraceError, match="st.async stores 32-bit values"):
        async_rotation(dtype=lk.bf16).ptx(F32, F32)

    @lk.kernel(num_warps=1, cluster=(2, 1, 1))
    def no_barrier(x: F32):
        buf = lk.shared_tensor(Layout((1, N), (N, 1)), lk.f32)
        lk.sm90.cluster_sync()
        lk.sm90.dsmem_store_async(buf.partition(TV), lk.full(TV, 1.0), cta=1, barrier=buf)
    with pytest.raises(lk.TraceError, match="dsmem_store_async"):
        no_barrier.ptx(F32)


def test_expect_tx_counts_positive_bytes():
    @lk.kernel(num_warps=1, cluster=(2, 1, 1))
    def zero(x: F32):
        full = lk.sm90.mbarrier_array(1, 1, name="full")
        with lk.if_(lk.eq(lk.thread_id(), 0)):
            lk.sm90.mbarrier_init(full)
            lk.sm90.mbarrier_expect_tx(full[0], 0)
    with pytest.raises(lk.TraceError, match=r"the bytes expected are an int in 1\.\."):
        zero.ptx(F32)
