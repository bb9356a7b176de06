"""The ordering rules of the static protocol check, over each thread class's events in program
order (the simulation of kernel_check supplies which waits passed on which phase):

- wrong parity: each wait on a barrier is for its next phase, so one class's consecutive waits
  on it alternate parity (a repeat with arrivals in between waits on a stale phase);
- race: a wait that passes at once on a fresh barrier (phase -1, parity 1) and is followed by
  reads of shared bytes that another class publishes on that barrier (its stores before its
  arrive, or a TMA copy completing on it): the read runs before the data lands; or a class of
  the ring (it arrives on a barrier the writer waits on) reading such bytes without ever
  waiting on the barrier array that publishes them;
- init: a barrier used by threads that pass no lk.barrier()/lk.sm90.cluster_sync() after its
  initialisation, or a cluster-scope use (peer arrive, multicast) without fence.mbarrier_init;
- wgmma overwrite: a release (arrive) while a wgmma reading shared bytes is still in flight,
  where another class overwrites those bytes after waiting on the released barrier;
- proxy fence: generic stores read by the async proxy (wgmma, TMA store) with no
  fence.proxy.async by the writers between the stores and the read (same class) or the
  writers' next barrier or arrive, which publishes them (other classes);
- TMA store: a TMA store's source overwritten, or left in flight at the end, before a
  commit + wait covers it;
- cp.async: a read of a cp.async destination before the wait (and barrier) that completes it
  (async_copy_rules);
- async overlap, unwaited read, early release, unwritten: overlapping asynchronous writes in
  flight at once, a read of a TMA load's bytes without the wait on the phase it completes, a
  ring stage released before its plain reads, a read of shared bytes nothing writes
  (shared_rules, on the happens-before of the simulated run).
Each kind is reported once per barrier array / buffer and class.
"""
from __future__ import annotations

from .async_copy_rules import cp_async
from .shared_rules import covers_any, shared_rules, union_of
from .kernel_check import slot_text
from .kernel_model import (Arrive, Commit, Copy, Finding, GroupWait, Init, InitFence,
                           KernelProtocol, ProxyFence, SharedRead, SharedWrite, ThreadBarrier,
                           Wait)

PROXIES = {"wgmma": "a wgmma operand", "tma_store": "a TMA store source"}


class Rules:
    def __init__(self, protocol: KernelProtocol, passes: dict):
        self.p = protocol
        self.passes = passes
        self.findings: list[Finding] = []
        self.seen: set = set()
        self.unions: dict = {}

    def add(self, kind: str, key, message: str, site) -> None:
        if (kind, key) not in self.seen:
            self.seen.add((kind, key))
            self.findings.append(Finding(kind, True, message, site))

    def name(self, slot) -> str:
        return slot_text(slot, self.p.ctas)

    # ---- wrong parity ---------------------------------------------------------------------
    def parity(self) -> None:
        for c in self.p.classes:
            last: dict[tuple, Wait] = {}
            arrived: set = set()
            for _, e in c.select(Arrive, Wait):
                if type(e) is Arrive:
                    arrived = set(last)
                else:
                    prev = last.get(e.slot)
                    if prev is not None and prev.parity == e.parity and e.slot in arrived:
                        self.add("wrong parity", (c.who, e.barrier),
                                 f"{c.who} waits on {self.name(e.slot)} for parity {e.parity} at "
                                 f"{e.site.text()}, the parity of its previous wait on it at "
                                 f"{prev.site.text()}, with arrivals of its own in between: each "
                                 "wait on a barrier is for its next phase, so the parities "
                                 "alternate; take stage and phase from one ring state over a "
                                 "counter that advances once per slot use (lk.sm90.producer_state "
                                 "/ lk.sm90.consumer_state(counter, STAGES))", e.site)
                    last[e.slot] = e
                    arrived.discard(e.slot)

    # ---- race -----------------------------------------------------------------------------
    def published(self) -> dict:
        """slot -> [(ByteRange, who, site)] of the bytes each class makes ready by arriving on
        the slot (its stores since its last wait) or by a copy completing on it."""
        out: dict[tuple, list] = {}
        for c in self.p.classes:
            stores: list = []
            for _, e in c.select(Wait, SharedWrite, Arrive, Copy):
                kind = type(e)
                if kind is Wait:
                    stores = []
                elif kind is SharedWrite:
                    stores.append((e.bytes, c.who, e.site))
                elif kind is Arrive:
                    out.setdefault(e.slot, []).extend(stores)
                elif e.dst is not None:
                    for cta in e.ctas:
                        dst = type(e.dst)(cta, e.dst.buffer, e.dst.start, e.dst.stop)
                        out.setdefault(e.slot(cta), []).append((dst, c.who, e.site))
        return out

    def unwaited(self, published: dict) -> None:
        """A ring member that reads what another class publishes on a barrier array it never
        waits on (it arrives on a barrier the writer waits on, so it is in the ring)."""
        classes = self.p.classes
        waits_on = [{e.barrier for _, e in c.select(Wait)} for c in classes]
        arrives_on = [{e.barrier for _, e in c.select(Arrive)} for c in classes]
        named: dict[str, list] = {}            # who -> indices of the classes so described
        for j, d in enumerate(classes):
            named.setdefault(d.who, []).append(j)
        for i, c in enumerate(classes):
            ring = {who for who, js in named.items()
                    if who != c.who and any(arrives_on[i] & waits_on[j] for j in js)}
            foreign = [(slot, [w for w in writes if w[1] in ring])
                       for slot, writes in published.items() if slot[1] not in waits_on[i]]
            foreign = [(slot, writes) for slot, writes in foreign if writes]
            if not foreign:
                continue
            for _, e in c.select(SharedRead):
                for slot, writes in foreign:
                    hit = next((w for w in writes if w[0].overlaps(e.bytes)), None)
                    if hit is not None:
                        self.add("race", (c.who, slot[1]),
                                 f"{c.who} reads {e.bytes.text()} at {e.site.text()}, which "
                                 f"{hit[1]} writes ({hit[2].text()}) and publishes on "
                                 f"{self.name(slot)}, but it never waits on '{slot[1]}': the "
                                 "read can run before the data lands; wait on the barrier "
                                 "that completes when the data is ready", e.site)
                        return

    def race(self) -> None:
        published = self.published()
        self.unwaited(published)
        for (index, position), phase in sorted(self.passes.items()):
            if phase != -1:
                continue
            c = self.p.classes[index]
            wait = c.events[position]
            writes = published.get(wait.slot, ())
            for e in c.events[position + 1:]:
                if isinstance(e, Wait) and e.slot == wait.slot:
                    break
                if not isinstance(e, SharedRead):
                    continue
                hit = next((w for w in writes if w[0].overlaps(e.bytes) and w[1] != c.who),
                           None)
                if hit is not None:
                    self.add("race", (c.who, wait.barrier),
                             f"{c.who} waits on {self.name(wait.slot)} for parity {wait.parity} "
                             f"at {wait.site.text()}, which passes at once on the fresh barrier "
                             "(its phase -1 has parity 1), so its read of "
                             f"{e.bytes.text()} at {e.site.text()} can run before {hit[1]} "
                             f"writes them ({hit[2].text()}, completing on "
                             f"{self.name(wait.slot)}); a first wait for data uses parity 0 "
                             "(lk.sm90.consumer_state)", wait.site)
                    break

    # ---- init -----------------------------------------------------------------------------
    def init(self) -> None:
        inits: dict[tuple, tuple] = {}       # (barrier, cta) -> (class, epochs, site, fenced)
        for i, c in enumerate(self.p.classes):
            cta_epoch = cluster_epoch = 0
            pending: list = []
            for _, e in c.select(Init, InitFence, ThreadBarrier):
                if isinstance(e, Init):
                    pending.append((e.barrier, e.cta))
                    inits[(e.barrier, e.cta)] = (i, cta_epoch, cluster_epoch, e.site, False,
                                                 e.partial)
                elif isinstance(e, InitFence):
                    for key in pending:
                        inits[key] = inits[key][:4] + (True,) + inits[key][5:]
                elif isinstance(e, ThreadBarrier) and e.waits and e.ident in (0, "cluster"):
                    cta_epoch += 1
                    cluster_epoch += e.ident == "cluster"
                    pending = []
        for i, c in enumerate(self.p.classes):
            cta_epoch = cluster_epoch = 0
            asked: set = set()      # a use's answer depends only on these (add: once a key)
            for _, e in c.select(ThreadBarrier, Arrive, Wait, Copy):
                kind = type(e)
                if kind is ThreadBarrier:
                    if e.waits and e.ident in (0, "cluster"):
                        cta_epoch += 1
                        cluster_epoch += e.ident == "cluster"
                    continue
                ctas = e.ctas if kind is Copy else (e.cta,)
                question = (e.barrier, ctas, cta_epoch, cluster_epoch)
                if question not in asked:
                    asked.add(question)
                    self.use(i, c, e, ctas, inits, cta_epoch, cluster_epoch,
                             remote=ctas != (c.cta,))

    def use(self, index, c, e, ctas, inits, cta_epoch, cluster_epoch, remote) -> None:
        for cta in ctas:
            found = inits.get((e.barrier, cta))
            if found is None:
                continue
            owner, i_cta, i_cluster, site, fenced, partial = found
            peer = cta != c.cta
            if (owner != index or partial) and \
                    (i_cluster >= cluster_epoch if peer else i_cta >= cta_epoch):
                sync = "lk.sm90.cluster_sync()" if peer else \
                    "lk.barrier() (or lk.sm90.cluster_sync())"
                self.add("init", e.barrier,
                         f"{c.who} uses {e.barrier}[{e.stage}]"
                         f"{' of CTA %d' % cta if self.p.ctas > 1 else ''} at {e.site.text()} "
                         f"before the initialisation at {site.text()} is visible to it: after "
                         "lk.sm90.mbarrier_init and lk.sm90.fence_mbarrier_init(), every thread "
                         f"passes {sync} before using the barrier", e.site)
            elif remote and not fenced:
                self.add("init", e.barrier,
                         f"{c.who} uses {e.barrier}[{e.stage}] across the cluster at "
                         f"{e.site.text()}, but its initialisation at {site.text()} is not "
                         "followed by lk.sm90.fence_mbarrier_init() before the cluster barrier, so "
                         "the peer CTAs and the TMA unit may not see it", e.site)

    # ---- async reads ------------------------------------------------------------------------
    def guarded_writes(self) -> dict:
        """slot -> {(cta, buffer): [(ByteRange, who, site, what)]}: the writes a class makes
        after waiting on slot, per buffer."""
        out: dict[tuple, dict] = {}
        # release() asks only for the buffers wgmma reads: the other writes are not kept
        wanted = {(e.bytes.cta, e.bytes.buffer) for c in self.p.classes
                  for _, e in c.select(SharedRead) if e.proxy == "wgmma"}

        def flush(guards, written: dict) -> None:
            for slot in guards if written else ():
                table = out.setdefault(slot, {})
                for key, items in written.items():
                    table.setdefault(key, []).extend(items)

        for c in self.p.classes:
            # the guards stay fixed from a segment's first write until its next wait
            guards, written, wrote = set(), {}, False
            for _, e in c.select(Wait, Copy, SharedWrite):
                if type(e) is Wait:
                    if wrote:
                        flush(guards, written)
                        guards, written, wrote = set(), {}, False
                    guards.add(e.slot)
                    continue
                wrote = True
                if type(e) is SharedWrite:
                    ranges, what = [e.bytes], "store"
                else:
                    ranges = [] if e.dst is None else [
                        type(e.dst)(cta, e.dst.buffer, e.dst.start, e.dst.stop) for cta in e.ctas]
                    what = e.what
                    if not ranges:          # it still ends the segment's waits
                        written.setdefault(None, [])
                for r in ranges:
                    if (r.cta, r.buffer) in wanted:
                        written.setdefault((r.cta, r.buffer), []).append((r, c.who, e.site,
                                                                          what))
            flush(guards, written)
        for table in out.values():
            table.pop(None, None)
        return out

    def in_flight(self) -> None:
        guarded = self.guarded_writes()
        for c in self.p.classes:
            groups = {"wgmma": [[]], "tma_store": [[]]}    # last list: uncommitted
            for _, e in c.select(SharedRead, Commit, GroupWait, Arrive, SharedWrite):
                kind = type(e)
                if kind is SharedRead:
                    if e.proxy in groups:
                        groups[e.proxy][-1].append(e)
                elif kind is Commit:
                    if e.kind in groups:
                        groups[e.kind].append([])
                elif kind is GroupWait:
                    if e.kind in groups:
                        kept = groups[e.kind][:-1]
                        kept = kept[len(kept) - e.pending:] if e.pending else []
                        groups[e.kind] = kept + [groups[e.kind][-1]]
                elif kind is Arrive:
                    if guarded.get(e.slot):
                        self.release(c, e, [r for g in groups["wgmma"] for r in g], guarded)
                else:
                    if len(groups["tma_store"]) == 1 and not groups["tma_store"][0]:
                        continue                    # no TMA store in flight
                    for read in (r for g in groups["tma_store"] for r in g):
                        if read.bytes.overlaps(e.bytes):
                            self.add("TMA store", (c.who, read.bytes.buffer),
                                     f"{c.who} writes {e.bytes.text()} at {e.site.text()} while "
                                     f"the TMA store at {read.site.text()} may still read them: "
                                     "lk.sm90.tma_store_commit() and lk.sm90.tma_store_wait() "
                                     "before overwriting a store's source", e.site)
            left = [r for g in groups["tma_store"] for r in g]
            if left:
                self.add("TMA store", (c.who, "end"),
                         f"{c.who} reaches the end of the kernel with the TMA store at "
                         f"{left[0].site.text()} still reading {left[0].bytes.text()} (no "
                         "lk.sm90.tma_store_commit() + lk.sm90.tma_store_wait() covers it): the "
                         "CTA's shared memory may be reused while the store reads it", left[0].site)

    def release(self, c, arrive: Arrive, reads: list, guarded: dict) -> None:
        table = guarded.get(arrive.slot)
        if not table or ("wgmma overwrite", (c.who, arrive.barrier)) in self.seen:
            return
        for read in reads:
            key = (read.bytes.cta, read.bytes.buffer)
            writes = table.get(key)
            if writes is None:
                continue
            spans = self.unions.get((arrive.slot, key))     # their bytes, to reject at once
            if spans is None:
                spans = self.unions[(arrive.slot, key)] = union_of(
                    [(w[0].start, w[0].stop) for w in writes])
            if not covers_any(spans, read.bytes):
                continue
            for dst, who, site, what in writes:
                if who != c.who and dst.overlaps(read.bytes):
                    self.add("wgmma overwrite", (c.who, arrive.barrier),
                             f"{c.who} releases {self.name(arrive.slot)} at "
                             f"{arrive.site.text()} while the wgmma at {read.site.text()} "
                             f"reading {read.bytes.text()} may still run (no lk.sm90.wgmma_wait "
                             f"retires it first), and {who}'s {what} at {site.text()}, issued "
                             f"after its wait on {self.name(arrive.slot)}, overwrites those "
                             "bytes; lk.sm90.wgmma_wait(n) for that wgmma before the arrive",
                             arrive.site)
                    return

    # ---- proxy fence ------------------------------------------------------------------------
    def proxy_fence(self) -> None:
        async_reads = [(c.who, e) for c in self.p.classes for _, e in c.select(SharedRead)
                       if e.proxy in PROXIES]
        for c in self.p.classes:
            unfenced: list = []

            def report(write, read_who, read):
                self.add("proxy fence", write.bytes.buffer,
                         f"{c.who} writes {write.bytes.text()} with generic stores at "
                         f"{write.site.text()}, and {read_who} reads them as "
                         f"{PROXIES[read.proxy]} (async proxy) at {read.site.text()} with no "
                         "lk.sm90.fence_proxy_async() by the writing threads in between: write, "
                         "lk.sm90.fence_proxy_async(), synchronise, then issue", write.site)

            def close(write):
                for who, read in async_reads:
                    if who != c.who and read.bytes.overlaps(write.bytes):
                        report(write, who, read)
                        return
            published: set = set()          # ids of unfenced writes already published
            for _, e in c.select(ProxyFence, SharedWrite, SharedRead, ThreadBarrier, Arrive):
                if isinstance(e, ProxyFence):
                    unfenced, published = [], set()
                elif isinstance(e, SharedWrite):
                    unfenced.append(e)
                elif isinstance(e, SharedRead) and e.proxy in PROXIES:
                    for w in unfenced:
                        if w.bytes.overlaps(e.bytes):
                            report(w, c.who, e)
                elif isinstance(e, (ThreadBarrier, Arrive)):
                    for w in unfenced:      # the writes are published unfenced here
                        if id(w) not in published:
                            published.add(id(w))
                            close(w)
            for w in unfenced:
                if id(w) not in published:
                    close(w)


def ordering_findings(protocol: KernelProtocol, passes: dict, sim=None) -> list[Finding]:
    """The findings of the rules in the module docstring, in the order listed there (the
    shared-memory rules need the Simulation `sim` that found `passes`)."""
    rules = Rules(protocol, passes)
    rules.parity()
    rules.race()
    rules.init()
    rules.in_flight()
    rules.proxy_fence()
    cp_async(rules)
    shared_rules(rules, sim)
    return rules.findings


__all__ = ["ordering_findings"]
