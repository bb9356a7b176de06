"""Warp roles and register budgets: which warpgroups do what, and how many registers each gets.

A warpgroup is 4 consecutive warps starting at a warp index that is a multiple of 4 (128
threads, `tid.x >> 7`). A `RoleSplit` gives consecutive warpgroups to `WarpRole`s in order and
checks the register arithmetic of `setmaxnreg` (hopper-ptx.md §6):

- a budget is a multiple of 8 in 24..256 (the setmaxnreg immediate);
- setmaxnreg needs a register cap at entry, or ptxas drops it (C7508). We emit `.maxntid T` +
  `.minnctapersm n` and ptxas derives the cap: the SM's registers split over n CTAs of T
  threads, rounded down to the 8-register allocation unit, at most 255. That cap is
  `entry_registers`; the CTA's register pool is fixed at launch to cap x T (the cap taken in
  whole allocation units);
- `.dec` must not go above the current count and `.inc` not below: a role below the cap
  decreases, above it increases, at the cap it emits nothing;
- the budgets over the block must fit the pool, or `.inc` blocks forever.

>>> split = RoleSplit([WarpRole("producer", 1, 24), WarpRole("consumer", 2, 240)])
>>> split.threads, split.entry_registers, split.total_registers, split.pool_registers
(384, 168, 64512, 64512)
>>> [(r.name, split.first_warpgroup(r.name), split.direction(r.name)) for r in split.roles]
[('producer', 0, 'dec'), ('consumer', 1, 'inc')]
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from layoutkit.ptx.isa.named_barrier import MAX_THREADS as MAX_THREADS_PER_CTA
from layoutkit.ptx.isa.setmaxnreg import MAX_REGISTERS, MIN_REGISTERS, REGISTER_GRANULE
from layoutkit.ptx.isa.warp import WARP_SIZE as WARP_THREADS

from .errors import RoleBudgetError

REGISTERS_PER_SM = 65536            # Hopper register file per SM (32-bit registers)
MAX_REGISTERS_PER_THREAD = 255      # ptxas's per-thread ceiling at entry
REGISTER_ALLOCATION_UNIT = 8        # registers per thread are allocated in multiples of 8
SETMAXNREG_RANGE = (MIN_REGISTERS, MAX_REGISTERS)   # setmaxnreg immediate (layoutkit.ptx)
WARPGROUP_WARPS = 4
WARPGROUP_THREADS = WARP_THREADS * WARPGROUP_WARPS
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def entry_register_cap(threads: int, ctas_per_sm: int = 1) -> int:
    """The per-thread register cap ptxas derives from `.maxntid threads` + `.minnctapersm n`.

    >>> [entry_register_cap(t) for t in (128, 256, 384, 512, 1024)]
    [255, 255, 168, 128, 64]
    """
    per_thread = REGISTERS_PER_SM // (threads * ctas_per_sm)
    per_thread -= per_thread % REGISTER_ALLOCATION_UNIT
    return min(per_thread, MAX_REGISTERS_PER_THREAD)


def _allocated(registers: int) -> int:
    """Registers per thread actually reserved: rounded up to the allocation unit."""
    return -(-registers // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT


@dataclass(frozen=True)
class WarpRole:
    """`warpgroups` consecutive warpgroups running one role with `registers` per thread
    (None: keep the entry cap, emit no setmaxnreg)."""

    name: str
    warpgroups: int
    registers: int | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise RoleBudgetError("a role name is an identifier (letters, digits, '_')",
                                  thing="WarpRole.name", value=self.name)
        if isinstance(self.warpgroups, bool) or not isinstance(self.warpgroups, int) \
                or self.warpgroups < 1:
            raise RoleBudgetError("must be a positive number of warpgroups (4 warps each)",
                                  thing=f"role '{self.name}' warpgroups", value=self.warpgroups)
        r = self.registers
        if r is None:
            return
        lo, hi = SETMAXNREG_RANGE
        if isinstance(r, bool) or not isinstance(r, int) or not lo <= r <= hi \
                or r % REGISTER_GRANULE:
            raise RoleBudgetError(f"must be a multiple of {REGISTER_GRANULE} in "
                                  f"{lo}..{hi} (setmaxnreg's register count)",
                                  thing=f"role '{self.name}' registers", value=r)

    @property
    def threads(self) -> int:
        return self.warpgroups * WARPGROUP_THREADS


class RoleSplit:
    """Roles laid over the block's warpgroups in order; checks budgets against the entry cap.

    `ctas_per_sm` is the `.minnctapersm` the kernel promises (1 for a warp-specialized kernel
    that owns the SM). Raises RoleBudgetError naming the role, the value and the rule.
    """

    def __init__(self, roles, *, ctas_per_sm: int = 1):
        self.roles: tuple[WarpRole, ...] = tuple(roles)
        if not self.roles or not all(isinstance(r, WarpRole) for r in self.roles):
            raise RoleBudgetError("a role split is a non-empty sequence of WarpRole",
                                  thing="RoleSplit roles", value=roles)
        names = [r.name for r in self.roles]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise RoleBudgetError("each role needs its own name (one branch per role)",
                                  thing="role name", value=dup[0])
        if isinstance(ctas_per_sm, bool) or not isinstance(ctas_per_sm, int) or ctas_per_sm < 1:
            raise RoleBudgetError("must be a positive integer (.minnctapersm)",
                                  thing="ctas_per_sm", value=ctas_per_sm)
        self.ctas_per_sm = ctas_per_sm
        self.threads = sum(r.threads for r in self.roles)
        if self.threads > MAX_THREADS_PER_CTA:
            raise RoleBudgetError(f"a CTA has at most {MAX_THREADS_PER_CTA} threads "
                                  f"({MAX_THREADS_PER_CTA // WARPGROUP_THREADS} warpgroups)",
                                  thing="block threads of " + "+".join(names),
                                  value=self.threads)
        self._first = {}
        first = 0
        for role in self.roles:
            self._first[role.name] = first
            first += role.warpgroups
        self.entry_registers = entry_register_cap(self.threads, ctas_per_sm)
        self.pool_registers = _allocated(self.entry_registers) * self.threads
        self.total_registers = sum(
            (r.registers if r.registers is not None else _allocated(self.entry_registers))
            * r.threads for r in self.roles)
        if self.total_registers > self.pool_registers:
            terms = " + ".join(f"{r.threads}*{r.registers or self.entry_registers} ({r.name})"
                               for r in self.roles)
            raise RoleBudgetError(
                f"{terms} = {self.total_registers} registers exceed the CTA's pool of "
                f"{self.pool_registers} ({self.threads} threads x {self.entry_registers} at entry, "
                f"{REGISTERS_PER_SM} per SM / {ctas_per_sm} CTA(s)); setmaxnreg.inc would "
                "block forever", thing="register budgets", value=self.total_registers)

    def role(self, name: str) -> WarpRole:
        for role in self.roles:
            if role.name == name:
                return role
        raise RoleBudgetError(f"no such role; roles: {', '.join(r.name for r in self.roles)}",
                              thing="role", value=name)

    def first_warpgroup(self, name: str) -> int:
        """Index (tid.x >> 7) of the role's first warpgroup."""
        return self._first[self.role(name).name]

    def warpgroup_range(self, name: str) -> range:
        first = self.first_warpgroup(name)
        return range(first, first + self.role(name).warpgroups)

    def thread_range(self, name: str) -> range:
        """The `tid.x` values of the role's threads."""
        wgs = self.warpgroup_range(name)
        return range(wgs.start * WARPGROUP_THREADS, wgs.stop * WARPGROUP_THREADS)

    def direction(self, name: str) -> str | None:
        """'dec', 'inc' or None (no setmaxnreg): the role's budget relative to the entry cap."""
        registers = self.role(name).registers
        if registers is None or registers == self.entry_registers:
            return None
        return "dec" if registers < self.entry_registers else "inc"

    def role_of_thread(self, tid: int) -> WarpRole:
        """The role that thread `tid` (tid.x) runs."""
        if not 0 <= tid < self.threads:
            raise RoleBudgetError(f"must be in 0..{self.threads - 1}", thing="tid.x", value=tid)
        wg = tid // WARPGROUP_THREADS
        for role in self.roles:
            if wg in self.warpgroup_range(role.name):
                return role
        raise AssertionError("roles cover every warpgroup")  # pragma: no cover

    def directives(self) -> dict:
        """The kernel directives that give ptxas the entry cap: `Module.kernel(name, **these)`."""
        return {"maxntid": self.threads, "minnctapersm": self.ctas_per_sm}

    def __repr__(self) -> str:
        parts = ", ".join(f"{r.name}: wg {self.first_warpgroup(r.name)}"
                          f"..{self.first_warpgroup(r.name) + r.warpgroups - 1} "
                          f"@ {r.registers or self.entry_registers}" for r in self.roles)
        return f"RoleSplit({parts}; entry cap {self.entry_registers})"


__all__ = ["REGISTERS_PER_SM", "RoleSplit", "SETMAXNREG_RANGE", "WARPGROUP_THREADS",
           "WarpRole", "entry_register_cap"]
