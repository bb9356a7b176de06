"""A traced kernel's synchronization, as data the static check reads: the mbarrier arrays, and
per thread class (threads that execute the same events in the same order) its events in
program order with loops run for concrete trip counts. layoutkit.dsl builds it from the IR
(layoutkit/dsl/check/extract.py); `layoutkit.sync.kernel_check.check_kernel` decides.

Units: stages are ints, byte ranges are [start, stop) byte offsets inside one shared buffer
(named by its allocation), `cta` is the rank of a CTA in its cluster (0 without clusters).
Every event carries the `Site` of the user's source line that made it.

>>> site = Site(None, "")
>>> Wait("full", 0, 0, 1, site).slot
(0, 'full', 0)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from operator import itemgetter

from layoutkit.ptx.builder import SourceLocation


@dataclass(frozen=True)
class Site:
    """The user's source line of an event and where in the loops it ran ("iteration 3 of the
    lk.range at line 40"; empty outside runtime loops)."""

    location: SourceLocation | None
    context: str = ""

    @property
    def line(self) -> str:
        return str(self.location.line) if self.location is not None else "?"

    def text(self) -> str:
        """'line 42' or 'line 42 (iteration 3 of the lk.range at line 40)'."""
        return f"line {self.line}" + (f" ({self.context})" if self.context else "")


@dataclass(frozen=True)
class BarrierDecl:
    """An mbarrier array: `stages` barriers named `name`, `arrive_count` arrivals a phase."""

    name: str
    stages: int
    arrive_count: int
    site: Site


@dataclass(frozen=True)
class ByteRange:
    """Bytes [start, stop) of shared buffer `buffer` in CTA `cta`."""

    cta: int
    buffer: str
    start: int
    stop: int

    def overlaps(self, other: "ByteRange") -> bool:
        return self.cta == other.cta and self.buffer == other.buffer and \
            self.start < other.stop and other.start < self.stop

    def text(self) -> str:
        return f"{self.buffer} bytes {self.start}..{self.stop - 1}"


# ---- events (one thread class executes each; `arrivals` count that class's threads) ---------
@dataclass(frozen=True)
class Init:
    """mbarrier.init of every barrier of array `barrier` in CTA `cta`; `partial`: only some
    threads of the class executing it initialise (the others need a barrier after it)."""

    barrier: str
    cta: int
    site: Site
    partial: bool = False


@dataclass(frozen=True)
class InitFence:
    """fence.mbarrier_init: earlier inits of this thread visible to the cluster/async proxy."""

    site: Site


@dataclass(frozen=True)
class Arrive:
    """`arrivals` arrivals on barrier[stage] of CTA `cta`, first adding `tx_bytes` expected
    transaction bytes (an arrive.expect_tx when `expect`). `remote`: the CTA is a peer."""

    barrier: str
    stage: int
    cta: int
    arrivals: int
    site: Site
    expect: bool = False
    tx_bytes: int = 0
    remote: bool = False

    @property
    def slot(self) -> tuple:
        return (self.cta, self.barrier, self.stage)


@dataclass(frozen=True)
class Wait:
    """try_wait.parity on barrier[stage] of CTA `cta` for the phase of parity `parity`."""

    barrier: str
    stage: int
    cta: int
    parity: int
    site: Site

    @property
    def slot(self) -> tuple:
        return (self.cta, self.barrier, self.stage)


@dataclass(frozen=True)
class Copy:
    """An async copy (TMA load) completing `nbytes` on barrier[stage] of each CTA in `ctas`,
    writing `dst` there (dst.cta is rewritten per receiving CTA). `issued`: False for bytes
    attached by hand (no copy op), modelled as landing when attached."""

    barrier: str
    stage: int
    ctas: tuple
    nbytes: int
    dst: ByteRange | None
    site: Site
    what: str = "TMA load"

    def slot(self, cta: int) -> tuple:
        return (cta, self.barrier, self.stage)


@dataclass(frozen=True)
class ThreadBarrier:
    """A barrier over threads: bar.sync/bar.arrive `ident` (0: lk.barrier(); 'cluster':
    lk.sm90.cluster_sync()) expecting `threads` threads; `waits` False for bar.arrive;
    `orders` False for a rendezvous that orders no memory (lk.sm90.cluster_sync(relaxed=True):
    barrier.cluster.arrive.relaxed)."""

    ident: object
    threads: int
    arrivals: int
    waits: bool
    site: Site
    orders: bool = True


@dataclass(frozen=True)
class SharedWrite:
    """A generic-proxy shared-memory store (st.shared) of `bytes`."""

    bytes: ByteRange
    site: Site


@dataclass(frozen=True)
class SharedRead:
    """A shared-memory read: `proxy` 'generic' (ld.shared, ldmatrix), 'wgmma' or 'tma_store'
    (async); `collective`: a warp reads together (ldmatrix), each lane receiving bytes that
    other lanes address."""

    bytes: ByteRange
    proxy: str
    site: Site
    collective: bool = False


@dataclass(frozen=True)
class AsyncWrite:
    """An asynchronous generic-proxy write of shared `bytes` (cp.async, `kind` 'cp_async'): it
    lands for the issuing threads at their GroupWait of `kind` that retires its Commit group,
    for the other threads at a thread barrier after that wait."""

    bytes: ByteRange
    site: Site
    kind: str = "cp_async"


@dataclass(frozen=True)
class ProxyFence:
    """fence.proxy.async.shared::cta."""

    site: Site


@dataclass(frozen=True)
class Commit:
    """Close the group of `kind` ('wgmma', 'tma_store' or 'cp_async') async operations issued
    since."""

    kind: str
    site: Site


@dataclass(frozen=True)
class GroupWait:
    """Wait until at most `pending` committed groups of `kind` are in flight."""

    kind: str
    pending: int
    site: Site


def describe_threads(role: str | None, cta: int | None, tids) -> str:
    """'role 'consumer' (threads 128-383)', 'thread 0', 'CTA 1 threads 0, 32, 64, 96', ...

    >>> describe_threads("producer", None, [0, 32, 64, 96, 128])
    "role 'producer' (5 threads 0, 32, ..., 128)"
    """
    tids = sorted(tids)
    if len(tids) == 1:
        text = f"thread {tids[0]}"
    elif tids == list(range(tids[0], tids[-1] + 1)):
        text = f"threads {tids[0]}-{tids[-1]}"
    elif len(tids) <= 4:
        text = "threads " + ", ".join(map(str, tids))
    else:
        text = f"{len(tids)} threads {tids[0]}, {tids[1]}, ..., {tids[-1]}"
    if role is not None:
        text = f"role '{role}' ({text})"
    return (f"CTA {cta} " if cta is not None else "") + text


@dataclass
class ThreadClass:
    """Threads executing the same events: their `role` (None outside warp roles), `cta`,
    thread indices in the CTA (`tids`); `in_cluster` adds the CTA to the description."""

    role: str | None
    cta: int
    tids: tuple
    events: list = field(default_factory=list)
    in_cluster: bool = False

    @property
    def size(self) -> int:
        return len(self.tids)

    @cached_property
    def who(self) -> str:
        return describe_threads(self.role, self.cta if self.in_cluster else None, self.tids)

    def know_positions(self, by_type: dict) -> None:
        """Give select the positions of the events per type ({type: [positions] ascending},
        every event in one list), as the builder of the events knows them; valid while the
        events stay as many."""
        self.__dict__.setdefault("_selected", {})[("by type", len(self.events))] = by_type

    def select(self, *kinds) -> list:
        """[(position, event)] of the events whose type is one of `kinds`, in program order:
        what a rule reading only those kinds walks (remembered per kinds while the events stay
        as many)."""
        key = (kinds, len(self.events))
        cache = self.__dict__.setdefault("_selected", {})
        found = cache.get(key)
        if found is None:
            by_type = cache.get(("by type", key[1]))
            if by_type is None:
                by_type = cache[("by type", key[1])] = {}
                for position, e in enumerate(self.events):
                    by_type.setdefault(type(e), []).append(position)
            lists = [by_type[kind] for kind in kinds if kind in by_type]
            positions = lists[0] if len(lists) == 1 else sorted(chain.from_iterable(lists))
            if len(positions) > 1:
                found = list(zip(positions, itemgetter(*positions)(self.events)))
            else:
                found = [(p, self.events[p]) for p in positions]
            cache[key] = found
        return found


@dataclass(frozen=True)
class Undecided:
    """Something the extraction could not decide (a data-dependent branch around sync ops)."""

    message: str
    site: Site


@dataclass
class KernelProtocol:
    """Everything the static check needs about one kernel (see the module docstring):
    `assumed` says which trip counts / parameter values the loops ran with."""

    kernel: str
    barriers: dict            # name -> BarrierDecl
    classes: list             # ThreadClass
    ctas: int = 1
    assumed: str = ""
    undecided: list = field(default_factory=list)
    # buffer -> the Site of an op touching it whose accesses the extraction did not follow (an
    # offset computed from memory, a branch no thread took), or None: a function, asked only
    # when a rule needs it; None: every access was followed
    unfollowed: object = None


@dataclass(frozen=True)
class Finding:
    """One diagnosis: `kind` (see kernel_check), `error` (False: a warning saying what could
    not be proven), the message, and the primary site."""

    kind: str
    error: bool
    message: str
    site: Site

    def text(self) -> str:
        return f"{self.kind}: {self.message}"


__all__ = ["describe_threads", "Arrive", "AsyncWrite", "BarrierDecl", "ByteRange", "Commit",
           "Copy", "Finding", "GroupWait", "Init", "InitFence", "KernelProtocol", "ProxyFence",
           "SharedRead", "SharedWrite", "Site", "ThreadBarrier", "ThreadClass", "Undecided",
           "Wait"]
