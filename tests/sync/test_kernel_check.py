"""layoutkit.sync's static check on hand-built KernelProtocols (no DSL): a correct ring passes,
and each rule fires on the smallest protocol that breaks it."""
from layoutkit.ptx.builder import SourceLocation
from layoutkit.sync import kernel_model as km
from layoutkit.sync.kernel_check import check_kernel

S = 2


def site(line: int) -> km.Site:
    return km.Site(SourceLocation("k.py", line))


def decls(full=1, empty=128):
    return {"full": km.BarrierDecl("full", S, full, site(1)),
            "empty": km.BarrierDecl("empty", S, empty, site(2))}


def producer(rounds, start=1, copy_bytes=4096, expect=4096):
    events = [km.Init("full", 0, site(3), partial=True), km.Init("empty", 0, site(3), True),
              km.ThreadBarrier(0, 256, 1, True, site(4))]
    for k in range(rounds):
        s, phase = k % S, start ^ ((k // S) & 1)
        events += [km.Wait("empty", s, 0, phase, site(10)),
                   km.Arrive("full", s, 0, 1, site(11), expect=True, tx_bytes=expect),
                   km.Copy("full", s, (0,), copy_bytes, km.ByteRange(0, "slot", 4096 * s,
                                                                    4096 * (s + 1)), site(12))]
    return km.ThreadClass("producer", 0, (0,), events)


def consumer(rounds, start=0, release=True, arrivals=128, tids=tuple(range(128, 256))):
    events = [km.ThreadBarrier(0, 256, len(tids), True, site(4))]
    for k in range(rounds):
        s, phase = k % S, start ^ ((k // S) & 1)
        events += [km.Wait("full", s, 0, phase, site(20)),
                   km.SharedRead(km.ByteRange(0, "slot", 4096 * s, 4096 * (s + 1)), "generic",
                                 site(21))]
        if release:
            events.append(km.Arrive("empty", s, 0, arrivals, site(22)))
    return km.ThreadClass("consumer", 0, tids, events)


def idle(tids=tuple(range(1, 128))):
    return km.ThreadClass("producer", 0, tids, [km.ThreadBarrier(0, 256, len(tids), True,
                                                                 site(4))])


def kinds(*classes, **barriers) -> list[str]:
    protocol = km.KernelProtocol("k", decls(**barriers), list(classes))
    return [f.kind for f in check_kernel(protocol)]


def test_correct_ring_has_no_finding():
    assert kinds(producer(5), idle(), consumer(5)) == []


def test_consumer_at_phase_1_is_a_race():
    assert kinds(producer(5), idle(), consumer(5, start=1))[0] == "race"


def test_bytes_short_of_the_expectation_never_complete():
    found = check_kernel(km.KernelProtocol("k", decls(), [producer(5, copy_bytes=2048), idle(),
                                                          consumer(5)]))
    assert [f.kind for f in found] == ["expect-tx", "deadlock"]
    assert "4096 bytes expected, the copies delivered 2048" in found[1].message


def test_bytes_beyond_the_expectation_complete_early():
    assert kinds(producer(5, copy_bytes=4096, expect=2048), idle(), consumer(5))[0] == \
        "expect-tx"


def test_too_many_arrivals_per_phase():
    found = check_kernel(km.KernelProtocol("k", decls(empty=64),
                                           [producer(5), idle(), consumer(5)]))
    assert found[0].kind == "arrive count"
    assert found[0].message.startswith("role 'consumer' (threads 128-255) arrives 128 time(s) "
                                       "on empty[0] at line 22, but its phase 0 expects only 64")


def test_missing_release_deadlocks_the_producer():
    found = check_kernel(km.KernelProtocol("k", decls(), [producer(5), idle(),
                                                          consumer(5, release=False)]))
    assert [f.kind for f in found] == ["deadlock"]
    assert "role 'producer' (thread 0) waits on empty[0] for parity 0 at line 10" in \
        found[0].message


def test_named_barrier_overflow_and_shortfall():
    def party(tids, count):
        return km.ThreadClass(None, 0, tids, [km.ThreadBarrier(1, count, len(tids), True,
                                                               site(30))])
    a, b = tuple(range(0, 128)), tuple(range(128, 256))
    assert kinds(party(a, 128), party(b, 128)) == []       # two uses of 128 threads each
    assert kinds(party(a, 192), party(b, 192)) == ["named barrier"]
    assert kinds(party(a, 512), party(b, 512)) == ["deadlock"]


def test_stage_outside_the_array():
    bad = km.ThreadClass(None, 0, (0,), [km.Init("full", 0, site(3)),
                                         km.Arrive("full", 5, 0, 1, site(40))])
    found = check_kernel(km.KernelProtocol("k", decls(), [bad]))
    assert found[0].kind == "stage" and "full[5] at line 40" in found[0].message


def test_wgmma_in_flight_at_release_and_unfenced_generic_writes():
    slot = km.ByteRange(0, "slot", 0, 4096)
    reader = km.ThreadClass("consumer", 0, tuple(range(128, 256)), [
        km.ThreadBarrier(0, 256, 128, True, site(4)),
        km.Wait("full", 0, 0, 0, site(20)),
        km.SharedRead(slot, "wgmma", site(50)), km.Commit("wgmma", site(51)),
        km.Arrive("empty", 0, 0, 128, site(52)), km.GroupWait("wgmma", 0, site(53))])
    writer = km.ThreadClass("producer", 0, tuple(range(128)), [
        km.Init("full", 0, site(3), True), km.Init("empty", 0, site(3), True),
        km.ThreadBarrier(0, 256, 128, True, site(4)),
        km.Wait("empty", 0, 0, 1, site(10)), km.SharedWrite(slot, site(60)),
        km.Arrive("full", 0, 0, 128, site(61))])
    protocol = km.KernelProtocol("k", decls(full=128), [writer, reader])
    assert [f.kind for f in check_kernel(protocol)] == ["wgmma overwrite", "proxy fence"]
