"""The distributed-shared-memory rules of the static protocol check (shared_rules runs them),
over the reads and writes that name another CTA's bytes (lk.sm90.dsmem_load / dsmem_store: a
ByteRange whose `cta` is not the class's own), on the happens-before of the simulated run
(layoutkit.sync.order):

- cluster rank: an access of a rank outside the cluster;
- cluster race: a write and another access of the same bytes by classes of two different CTAs
  with neither ordered before the other (no lk.sm90.cluster_sync() between them: across CTAs
  only the cluster barrier orders shared memory here);
- cluster start: an access of a peer CTA's shared memory before the class's first cluster
  barrier (the peer may not have started, its shared memory not yet its own);
- cluster exit: an access of a peer's shared memory after the class's last ordering cluster
  barrier (the peer may exit, and its shared memory go to another CTA, before the access
  lands; a relaxed barrier does not wait for the access).

Spans are per thread class (layoutkit/dsl/check), so an overlap is of spans; each kind is
reported once per buffer. Ordering through a peer's mbarrier (a remote arrive the owner waits
on) is not followed: such a kernel reports a cluster race.
"""
from __future__ import annotations

from .kernel_model import SharedRead, SharedWrite, ThreadBarrier


def _cluster_barrier(e, ordering: bool = False) -> bool:
    """A cluster barrier (an ordering one: release/acquire, when `ordering`)."""
    return isinstance(e, ThreadBarrier) and e.waits and e.ident == "cluster" and \
        (e.orders or not ordering)


def cluster_memory_rules(rules, sim, order) -> None:
    """Report the findings of the module docstring into `rules` (a kernel_rules.Rules)."""
    classes = rules.p.classes
    touched: dict[tuple, list] = {}          # (cta, buffer) -> [(class, position, event)]
    remote: set = set()                      # the (cta, buffer) keys a peer touches
    for i, c in enumerate(classes):
        reached = sim.positions[i]
        syncs = c.select(ThreadBarrier)
        barriers = [p for p, e in syncs if p < reached and _cluster_barrier(e)]
        ordering = [p for p, e in syncs if p < reached and _cluster_barrier(e, ordering=True)]
        for position, e in c.select(SharedRead, SharedWrite):
            if position >= reached:
                break
            if e.bytes.cta == c.cta:
                continue
            key = (e.bytes.cta, e.bytes.buffer)
            remote.add(key)
            verb = "writes" if isinstance(e, SharedWrite) else "reads"
            where = f"{c.who} {verb} {e.bytes.text()} of cluster rank {e.bytes.cta} at " \
                    f"{e.site.text()}"
            if not 0 <= e.bytes.cta < rules.p.ctas:
                rules.add("cluster rank", e.bytes.buffer,
                          f"{where}, outside the cluster's {rules.p.ctas} CTAs (ranks 0.."
                          f"{rules.p.ctas - 1}): the access would fault; name a rank of the "
                          "cluster", e.site)
                continue
            if not barriers or barriers[0] > position:
                rules.add("cluster start", e.bytes.buffer,
                          f"{where} before any lk.sm90.cluster_sync(): the peer CTA may not "
                          "have started, and its shared memory is not yet its own; call "
                          "lk.sm90.cluster_sync() before the first access of a peer", e.site)
            if not ordering or ordering[-1] < position:
                rules.add("cluster exit", e.bytes.buffer,
                          f"{where} after the last lk.sm90.cluster_sync() of its threads: the "
                          "peer may exit before the access lands; end the exchange with "
                          "lk.sm90.cluster_sync()", e.site)
    for i, c in enumerate(classes) if remote else ():     # every access of those bytes
        reached = sim.positions[i]
        for position, e in c.select(SharedRead, SharedWrite):
            if position >= reached:
                break
            key = (e.bytes.cta, e.bytes.buffer)
            if key in remote:
                touched.setdefault(key, []).append((i, position, e))
    for key in remote:
        accesses = touched[key]
        for wi, wpos, w in accesses:
            if not isinstance(w, SharedWrite):
                continue
            for ai, apos, a in accesses:
                if classes[ai].cta == classes[wi].cta or (ai, apos) == (wi, wpos) or \
                        not w.bytes.overlaps(a.bytes) or \
                        order.seen(ai, apos, wi) >= wpos or order.seen(wi, wpos, ai) >= apos:
                    continue
                verb = "writes" if isinstance(a, SharedWrite) else "reads"
                rules.add("cluster race", key[1],
                          f"{classes[ai].who} {verb} {a.bytes.text()} of cluster rank {key[0]} "
                          f"at {a.site.text()}, which {classes[wi].who} writes at "
                          f"{w.site.text()} with no lk.sm90.cluster_sync() between the two: "
                          "across CTAs only the cluster barrier orders shared memory, so the "
                          "result depends on timing; put lk.sm90.cluster_sync() between the "
                          "write and the other access", a.site)


__all__ = ["cluster_memory_rules"]
