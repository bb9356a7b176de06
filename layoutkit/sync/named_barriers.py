"""Named barriers: 16 hardware barriers per CTA, each with an id and a participating thread count.

Rules (hopper-ptx.md §7, PTX ISA "barrier"): ids 0..15; id 0 is what `bar.sync 0`
(`__syncthreads`) uses, so layoutkit keeps it for whole-CTA syncs; the count is the total of
arriving and waiting threads, a multiple of 32 (a warp counts whole); `bar.arrive` needs the
count. All participants must agree on the count, so a barrier is one value used everywhere.

>>> ids = NamedBarrierAllocator(block_threads=384)
>>> ids.allocate("kv_ready", 288)
NamedBarrier(id=1, threads=288, name='kv_ready')
>>> ids.allocate("wg1_turn", 256, id=3).id
3
"""
from __future__ import annotations

from dataclasses import dataclass

from layoutkit.ptx.isa.named_barrier import MAX_THREADS
from layoutkit.ptx.isa.named_barrier import NUM_BARRIERS as NAMED_BARRIER_COUNT

from .errors import NamedBarrierError
from .roles import WARP_THREADS, RoleSplit

WHOLE_CTA_ID = 0               # bar.sync 0 is __syncthreads: layoutkit keeps id 0 for the CTA


@dataclass(frozen=True)
class NamedBarrier:
    """Hardware barrier `id` (0..15) shared by `threads` threads (a multiple of 32)."""

    id: int
    threads: int
    name: str = ""

    def __post_init__(self):
        label = f"named barrier '{self.name}'" if self.name else "named barrier"
        if isinstance(self.id, bool) or not isinstance(self.id, int) \
                or not 0 <= self.id < NAMED_BARRIER_COUNT:
            raise NamedBarrierError(f"must be in 0..{NAMED_BARRIER_COUNT - 1} (a CTA has "
                                    f"{NAMED_BARRIER_COUNT} named barriers)",
                                    thing=f"{label} id", value=self.id)
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) \
                or not WARP_THREADS <= self.threads <= MAX_THREADS \
                or self.threads % WARP_THREADS:
            raise NamedBarrierError(f"must be a multiple of {WARP_THREADS} in "
                                    f"{WARP_THREADS}..{MAX_THREADS} (warps take part whole)",
                                    thing=f"{label} threads", value=self.threads)

    def __str__(self) -> str:
        return f"named barrier {self.id} ('{self.name}', {self.threads} threads)"


class NamedBarrierAllocator:
    """Hands out ids 1..15 (0 is the whole-CTA barrier) and refuses clashes.

    `block_threads` (or a `split`, whose threads it then is) bounds every count; with a split,
    `roles=` names the roles whose threads take part, and the count may not exceed theirs.
    """

    def __init__(self, *, block_threads: int | None = None, split: RoleSplit | None = None):
        if split is not None:
            if block_threads is not None and block_threads != split.threads:
                raise NamedBarrierError(f"the role split has {split.threads} threads",
                                        thing="block_threads", value=block_threads)
            block_threads = split.threads
        if block_threads is not None and (
                isinstance(block_threads, bool) or not isinstance(block_threads, int)
                or not WARP_THREADS <= block_threads <= MAX_THREADS
                or block_threads % WARP_THREADS):
            raise NamedBarrierError(f"must be a multiple of {WARP_THREADS} in "
                                    f"{WARP_THREADS}..{MAX_THREADS}", thing="block_threads",
                                    value=block_threads)
        self.block_threads = block_threads
        self.split = split
        self._by_id: dict[int, NamedBarrier] = {}

    @property
    def whole_cta(self) -> NamedBarrier:
        """Barrier 0 over the whole block (`bar.sync 0`)."""
        if self.block_threads is None:
            raise NamedBarrierError("the whole-CTA barrier needs the block size",
                                    thing="whole_cta", value=None)
        return NamedBarrier(WHOLE_CTA_ID, self.block_threads, "cta")

    def allocate(self, name: str, threads: int, *, roles=None, id: int | None = None) \
            -> NamedBarrier:
        """A new barrier named `name` for `threads` threads, at `id` or the lowest free id."""
        if not isinstance(name, str) or not name:
            raise NamedBarrierError("a named barrier needs a non-empty name (it appears in "
                                    "messages)", thing="named barrier name", value=name)
        for other in self._by_id.values():
            if other.name == name:
                raise NamedBarrierError(f"is already {other}", thing="named barrier name",
                                        value=name)
        if id is None:
            free = [i for i in range(1, NAMED_BARRIER_COUNT) if i not in self._by_id]
            if not free:
                raise NamedBarrierError(f"all ids 1..{NAMED_BARRIER_COUNT - 1} are taken "
                                        f"({', '.join(b.name for b in self._by_id.values())})",
                                        thing=f"named barrier '{name}'", value=None)
            id = free[0]
        elif id == WHOLE_CTA_ID:
            raise NamedBarrierError("id 0 is reserved for whole-CTA syncs (bar.sync 0 / "
                                    "__syncthreads); use the allocator's whole_cta",
                                    thing=f"named barrier '{name}' id", value=id)
        barrier = NamedBarrier(id, threads, name)
        if id in self._by_id:
            raise NamedBarrierError(f"is already taken by {self._by_id[id]}",
                                    thing=f"named barrier '{name}' id", value=id)
        if self.block_threads is not None and threads > self.block_threads:
            raise NamedBarrierError(f"exceeds the block's {self.block_threads} threads (the "
                                    "barrier would never complete)",
                                    thing=f"named barrier '{name}' threads", value=threads)
        if roles is not None:
            self._check_roles(barrier, roles)
        self._by_id[id] = barrier
        return barrier

    def _check_roles(self, barrier: NamedBarrier, roles) -> None:
        if self.split is None:
            raise NamedBarrierError("roles= needs an allocator made with split=",
                                    thing=f"named barrier '{barrier.name}' roles", value=roles)
        roles = (roles,) if isinstance(roles, str) else tuple(roles)
        available = sum(self.split.role(r).threads for r in roles)
        if barrier.threads > available:
            raise NamedBarrierError(
                f"exceeds the {available} threads of role(s) {', '.join(roles)} that use it "
                "(the barrier would never complete)",
                thing=f"named barrier '{barrier.name}' threads", value=barrier.threads)

    @property
    def barriers(self) -> tuple[NamedBarrier, ...]:
        """The allocated barriers, by id."""
        return tuple(self._by_id[i] for i in sorted(self._by_id))


__all__ = ["NAMED_BARRIER_COUNT", "NamedBarrier", "NamedBarrierAllocator", "WHOLE_CTA_ID"]
