"""The cp.async rule (layoutkit/sync/async_copy_rules.py) on hand-built KernelProtocols: commit
groups retire by cp.async.wait_group's count, a barrier after the wait shows the copies to the
other threads, and each way of reading too early is one finding."""
from layoutkit.ptx.builder import SourceLocation
from layoutkit.sync import kernel_model as km
from layoutkit.sync.kernel_check import check_kernel

STAGE = 1024


def site(line: int) -> km.Site:
    return km.Site(SourceLocation("k.py", line))


def stage(s: int) -> km.ByteRange:
    return km.ByteRange(0, "ring", STAGE * s, STAGE * (s + 1))


def copy(s, line=10):
    return [km.AsyncWrite(stage(s), site(line)), km.Commit("cp_async", site(line + 1))]


def wait(pending, line=20):
    return km.GroupWait("cp_async", pending, site(line))


def barrier(threads=128, arrivals=128):
    return km.ThreadBarrier(0, threads, arrivals, True, site(30))


def read(s, collective=False, line=40):
    return km.SharedRead(stage(s), "generic", site(line), collective)


def findings(*classes):
    protocol = km.KernelProtocol("k", {}, [km.ThreadClass(None, 0, tids, events)
                                          for tids, events in classes])
    return [(f.kind, f.error, f.site.location.line) for f in check_kernel(protocol)]


ALL = tuple(range(128))


def test_a_ring_that_waits_for_the_oldest_group_then_synchronises_passes():
    events = copy(0) + copy(1)
    for k in range(4):                       # wait(1): the oldest of two groups has landed
        events += [wait(1), barrier(), *copy((k + 2) % 3), read(k % 3, collective=True)]
    assert findings((ALL, events)) == []


def test_wait_count_leaves_the_newest_groups_in_flight():
    early = copy(0) + copy(1) + [wait(1), barrier(), read(1, line=41)]
    assert findings((ALL, early)) == [("cp.async", True, 41)]
    assert findings((ALL, copy(0) + copy(1) + [wait(0), barrier(), read(1)])) == []


def test_a_copy_after_the_last_commit_is_not_waited_for():
    events = [km.AsyncWrite(stage(0), site(10)), wait(0), barrier(), read(0)]
    assert findings((ALL, events)) == [("cp.async", True, 40)]


def test_without_a_barrier_after_the_wait():
    assert findings((ALL, copy(0) + [wait(0), read(0, collective=True)])) == \
        [("cp.async", True, 40)]
    assert findings((ALL, copy(0) + [wait(0), read(0)])) == [("cp.async", False, 40)]
    assert findings(((0,), copy(0) + [wait(0), read(0, collective=True)])) == []


def test_other_class_reads_in_the_barrier_epoch_of_the_copy():
    writer = (tuple(range(32)), copy(0) + [wait(0), barrier(arrivals=32)])
    reader = (tuple(range(32, 128)), [read(0), barrier(arrivals=96)])
    late = (tuple(range(32, 128)), [barrier(arrivals=96), read(0)])
    assert findings(writer, reader) == [("cp.async", True, 40)]
    assert findings(writer, late) == []
    named = (tuple(range(32, 128)), [km.ThreadBarrier(1, 128, 96, True, site(31)), read(0),
                                     barrier(arrivals=96)])
    writer_named = (tuple(range(32)), copy(0) + [wait(0), km.ThreadBarrier(1, 128, 32, False,
                                                                           site(31)),
                                                 barrier(arrivals=32)])
    assert findings(writer_named, named) == [("cp.async", False, 40)]
