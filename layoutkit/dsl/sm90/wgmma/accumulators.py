"""The accumulator protocol of wgmma, checked on the IR: in-place accumulators, reads only after
the covering wait, fences after register writes; and which wait retires which wgmma.

wgmma updates its accumulator registers in place (PTX: the d operand is read and written; a
copy between issue and wait serializes the pipeline). In the SSA IR that is a linear use: the
accumulator value a wgmma consumes is dead afterwards, because its registers now hold the result.
Rules (PTX ISA "wgmma.mma_async", "wgmma.fence", "wgmma.wait_group"), each an
`AccumulatorUseError` at the reading op's source line:

1. A value consumed as a wgmma accumulator is read by no later op, and a wgmma inside an
   lk.range consumes only values defined in that loop's body (else it would be consumed once
   per iteration): carry the accumulator through the loop.
2. A wgmma result (and a register A operand) is read only after an lk.sm90.wgmma_wait covers the
   group it was committed in. Exceptions: the next wgmma chaining on the accumulator, and
   loop.next(acc) when acc stays in the loop's own registers (no copy).
3. Fences (PTX ISA "wgmma.fence": required between any other instruction's access to a wgmma's
   accumulator or A registers and that wgmma). A wgmma is an error when, since the last
   lk.sm90.wgmma_fence() on the path to it (or with none before it):
   - a non-wgmma instruction wrote its accumulator registers in place (a loop's entry copy, a
     loop.next copy);
   - an op wrote the accumulator value it accumulates into, or its register A operand
     (acc * alpha, lk.full, lk.cast after the fence);
   - an op read the registers it writes (the previous iteration's result read by the
     epilogue or softmax, then overwritten in place or by the next execution).
   Where the only fence in between runs inside an lk.if_ / lk.sm90.elect_one region, whether it
   runs could not be proven: a `lk.ProtocolWarning` at the wgmma says so (never silence).
   The first wgmma of a thread with no fence at all is the protocol check's (it follows each
   thread class's path exactly: layoutkit.sync.wgmma_rules).
4. A wgmma whose lowering writes registers (register-A packing, accumulator copies) is not
   re-executed while its previous execution is in flight.

Loops are simulated for two iterations; a branch body as if taken, its effects merged (a warp
role's fence does not order another role's registers: a fence inside any region does not count
after it).
In-place rule (shared with the lowering): accumulator position i of a wgmma reuses its operand's
registers when the operand is a loop-carried value, a loop result or a wgmma result, appears
once among the accumulator operands, and is read by no `select` (which may alias it).
"""
from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass, field

from ...core.errors import TraceError
from ...core.ir import Block, Function, Op

MMA, FENCE, COMMIT, WAIT, UNDEF = "wgmma", "wgmma_fence", "wgmma_commit", "wgmma_wait", \
    "wgmma_undef"


class AccumulatorUseError(TraceError):
    """A wgmma accumulator or register operand is used against the in-place/async protocol."""


def _line(op: Op | None) -> str:
    return str(op.location.line) if op is not None and op.location is not None else "?"


@dataclass
class Issue:
    """One execution of a wgmma op in the simulation."""

    op: Op
    serial: int


def accumulators(op: Op) -> tuple:
    return op.operands[:op.attrs["acc_count"]]


def register_a(op: Op) -> tuple:
    if op.attrs["a"]["kind"] != "registers":
        return ()
    start = op.attrs["acc_count"]
    return op.operands[start:start + op.attrs["a_count"]]


def _ops(block: Block, open_blocks):
    """The ops of `block` in order as the trace appends them: None at its end while its id is
    in `open_blocks` (more may come), then the ops appended since. Ops the trace inserts before
    the last one given (special registers, a role's thread index: no wgmma effects) are not
    given."""
    ops = block.ops
    at, last = -1, None
    while True:
        if last is not None:
            while ops[at] is not last:          # moved on by insertions before it
                at += 1
        if at + 1 < len(ops):
            at += 1
            last = ops[at]
            yield last
        elif id(block) in open_blocks:
            yield None
        else:
            return


class Facts:
    """Per-function facts: where each value is defined, which values selects read, and the
    register identity ('home') of accumulator values. Scanned as far as the blocks in
    `open_blocks` are traced; `advance()` scans what was appended since."""

    def __init__(self, fn: Function, open_blocks=frozenset()):
        self.def_op: dict[int, Op] = {}
        self.def_loop: dict[int, Op | None] = {}
        self.home: dict[int, tuple] = {}
        self.select_read: set[int] = set()
        self.wgmma_homes: set[tuple] = set()     # the registers some wgmma writes
        self.inputs: set[int] = set()            # values a wgmma reads from registers
        self._in_place: dict[int, tuple[bool, ...]] = {}
        self.a_homes: set[tuple] = set()         # the homes of register A operands
        # a wgmma scanned by advance() writes the home of an earlier register A operand: the
        # checks of the wgmmas already walked would read that home's accesses differently
        self.stale = False
        self._scanner = self._scan(fn.body, None, open_blocks)
        self.advance()

    def advance(self) -> None:
        """Scan the ops appended since the last call (all of them once no block is open)."""
        next(self._scanner, None)

    def _scan(self, block: Block, loop: Op | None, open_blocks):
        for op in _ops(block, open_blocks):
            if op is None:
                yield
                continue
            if op.name == "select":
                self.select_read.update(v.id for v in op.operands[1:])
            if op.name == "for":
                body = op.blocks[0]
                self.def_loop[body.args[0].id] = op
                for p, arg in enumerate(body.args[1:]):
                    self.def_loop[arg.id] = op
                    self.home[arg.id] = ("loop", id(op), p)
            for inner in op.blocks:
                yield from self._scan(inner, op if op.name == "for" else loop, open_blocks)
            for r in op.results:
                self.def_op[r.id] = op
                self.def_loop[r.id] = loop
            if op.name == "for":
                for p, r in enumerate(op.results):
                    self.home[r.id] = ("loop", id(op), p)
            elif op.name == MMA:
                flags = self.in_place(op)
                for i, (v, r) in enumerate(zip(accumulators(op), op.results)):
                    home = self.home[r.id] = self.home[v.id] if flags[i] else \
                        ("wgmma", id(op), i)
                    if home not in self.wgmma_homes and home in self.a_homes:
                        self.stale = True
                    self.wgmma_homes.add(home)
                    if not flags[i] and op.attrs["accumulate"] is not False:
                        self.inputs.add(v.id)
                for v in register_a(op):
                    self.inputs.add(v.id)
                    if v.id in self.home:
                        self.a_homes.add(self.home[v.id])

    def in_place(self, op: Op) -> tuple[bool, ...]:
        """Per accumulator position: does the result take the operand's registers?"""
        found = self._in_place.get(id(op))
        if found is None:
            accs = accumulators(op)
            ids = [v.id for v in accs]
            homes = [self.home.get(i) for i in ids]
            found = tuple(h is not None and ids.count(i) == 1 and homes.count(h) == 1
                          and i not in self.select_read for i, h in zip(ids, homes))
            self._in_place[id(op)] = found
        return found


@dataclass
class State:
    pending: dict = field(default_factory=dict)      # value id -> Issue writing it
    a_busy: dict = field(default_factory=dict)       # value id -> Issue reading it (A regs)
    consumed: dict = field(default_factory=dict)     # value id -> wgmma op that consumed it
    uncommitted: list = field(default_factory=list)  # Issues
    groups: list = field(default_factory=list)       # committed groups (lists of Issues)
    # since the last fence: home -> Access of its registers by another instruction (a copy
    # into them, a read), home -> Access that copied into them, and value id -> (op, tick)
    # that wrote it (recorded for every value: whether a later wgmma reads it is not known yet)
    dirty: dict = field(default_factory=dict)
    copied: dict = field(default_factory=dict)
    written: dict = field(default_factory=dict)
    last_fence: Op | None = None
    fence_tick: int = 0
    # (fence op, region op, tick) of the latest fence inside a region walked as if taken
    region_fence: tuple | None = None

    def in_flight(self):
        yield from self.uncommitted
        for group in self.groups:
            yield from group

    def copy(self) -> "State":
        """A copy whose containers are new (the Issues and ops are shared)."""
        return State(dict(self.pending), dict(self.a_busy), dict(self.consumed),
                     list(self.uncommitted), [list(g) for g in self.groups], dict(self.dirty),
                     dict(self.copied), dict(self.written), self.last_fence, self.fence_tick,
                     self.region_fence)

    def merge(self, other: "State") -> None:
        """Union with the state of a path that may or may not have run."""
        for name in ("pending", "a_busy", "consumed", "dirty", "copied", "written"):
            getattr(self, name).update(getattr(other, name))
        self.uncommitted = other.uncommitted
        self.groups = other.groups
        if other.region_fence is not None and (self.region_fence is None or
                                               other.region_fence[2] > self.region_fence[2]):
            self.region_fence = other.region_fence


@dataclass(frozen=True)
class Access:
    """A non-wgmma op's access to wgmma registers: `what` is 'copy' (a loop's copy into
    them), 'read' or 'write' (it defined a value a wgmma reads), of `value`, at `tick`."""

    op: Op
    what: str
    value: object
    tick: int


class Checker:
    """Walks the IR in program order (see the module docstring); `retired` maps each wgmma
    op's id to the wait ops that retired one of its executions. The walk stops at the end of
    a block whose id is in `open_blocks` (a live set while tracing); `advance()` walks on
    through what was appended since (after `facts.advance()`)."""

    def __init__(self, fn: Function, open_blocks=frozenset()):
        self.facts = Facts(fn, open_blocks)
        self.open_blocks = open_blocks
        self.retired: dict[int, list[Op]] = {}
        self.serial = 0
        self.tick = 0                        # ops walked: orders accesses and fences
        self.warnings: dict[int, tuple] = {}     # wgmma op id -> (what was not proven, location)
        self.state = State()
        self.yielded: dict[int, Issue] = {}
        self.loops: list[Op] = []
        self._walker = self.block(fn.body)
        self.advance()

    def advance(self) -> None:
        next(self._walker, None)

    # ---- errors -----------------------------------------------------------------------------
    def fail(self, op: Op, message: str) -> None:
        raise AccumulatorUseError(message, op.location)

    def _read_error(self, op: Op, v, issue: Issue, role: str) -> None:
        reader = f"this op ({op.name})"
        if op.name == "yield":
            reader = "loop.next (a copy into the loop's registers at the end of its body)"
        self.fail(op, f"{reader} reads {v!r}, the {role} of the wgmma at line {_line(issue.op)}, "
                      "while that wgmma may still run; commit it (lk.sm90.wgmma_commit()) and "
                      "wait for it (lk.sm90.wgmma_wait(n)) before reading")

    # ---- walking ----------------------------------------------------------------------------
    def block(self, block: Block):
        for op in _ops(block, self.open_blocks):
            if op is None:
                yield
                continue
            self.op(op)
            if op.name == "for":
                yield from self.loop(op)
            elif op.blocks:
                yield from self.branch(op)

    def op(self, op: Op) -> None:
        """The operand rules and accesses of `op`, and its handler unless it has a region."""
        s = self.state
        self.tick += 1
        accs = {v.id for v in accumulators(op)} if op.name == MMA else set()
        for position, v in enumerate(op.operands):
            if v.id in s.consumed:
                by = s.consumed[v.id]
                self.fail(op, f"{v!r} was consumed as the accumulator of the wgmma at line "
                              f"{_line(by)}, which updates it in place: read the wgmma's result "
                              "instead (acc = lk.sm90.wgmma(acc, ...)); the old value is gone")
            if v.id in accs:
                continue
            if op.name == "yield" and v.id in s.pending:
                if self.facts.home.get(v.id) == ("loop", id(self.loops[-1]), position):
                    continue
            if v.id in s.pending:
                self._read_error(op, v, s.pending[v.id], "accumulator result")
            if v.id in s.a_busy:
                self._read_error(op, v, s.a_busy[v.id], "register A operand")
        if op.name != MMA:
            self.accesses(op)
        handler = {MMA: self.mma, FENCE: self.fence, COMMIT: self.commit, WAIT: self.wait,
                   "yield": self.yield_}.get(op.name)
        if handler is not None:
            handler(op)

    def accesses(self, op: Op) -> None:
        """Record `op`'s reads of wgmma registers and its writes of wgmma input values."""
        s, facts = self.state, self.facts
        loop = self.loops[-1] if op.name == "yield" and self.loops else None
        for position, v in enumerate(op.operands):
            home = facts.home.get(v.id)
            if home is not None and \
                    (loop is None or home != ("loop", id(loop), position)):   # not a no-op
                s.dirty[home] = Access(op, "read", v, self.tick)
        if op.name not in ("for", UNDEF):
            for r in op.results:
                s.written[r.id] = (op, self.tick)

    def write(self, v) -> Access | None:
        """The write of `v` since the last fence, if any."""
        found = self.state.written.get(v.id)
        return None if found is None else Access(found[0], "write", v, found[1])

    def copy_or_read(self, home) -> Access | None:
        """The latest access to `home`'s registers since the last fence: a copy into them, or
        (when a wgmma writes them) a read."""
        table = self.state.dirty if home in self.facts.wgmma_homes else self.state.copied
        return table.get(home)

    def hazard(self, op: Op, access: Access, message: str) -> None:
        """An access since the last fence: an error, or a warning when a fence inside a region
        walked as if taken came after it (whether that fence runs is not known here)."""
        region = self.state.region_fence
        if region is None or region[2] < access.tick:
            self.fail(op, message)
        fence, where, _ = region
        kind = {"if": "lk.if_", "elect_one": "lk.sm90.elect_one()"}.get(where.name, where.name)
        text = (f"could not prove that an lk.sm90.wgmma_fence() runs between the op "
                f"({access.op.name}) at line {_line(access.op)} and the wgmma at line "
                f"{_line(op)}: the only fence after that op, at line {_line(fence)}, is inside "
                f"the {kind} at line {_line(where)}, which not every thread may run. "
                f"Unproven: {message}")
        self.warnings.setdefault(id(op), (text, op.location))     # one per wgmma op

    def _since(self) -> str:
        fence = self.state.last_fence
        return f"after the last lk.sm90.wgmma_fence() (line {_line(fence)})" if fence is not None \
            else "with no lk.sm90.wgmma_fence() after it"

    def fences(self, op: Op, flags) -> None:
        """Rule 3 of the module docstring for the wgmma `op`."""
        s, facts = self.state, self.facts
        accs = accumulators(op)
        for i, (v, r) in enumerate(zip(accs, op.results)):
            access = s.dirty.get(facts.home.get(r.id))
            if access is not None and access.what == "copy":
                self.hazard(op, access,
                            f"the wgmma updates {v!r} in place, but its registers were written by "
                            f"a copy at line {_line(access.op)} after the last "
                            "lk.sm90.wgmma_fence(); call lk.sm90.wgmma_fence() after that write "
                            "and before the wgmma (inside the loop body for a carried accumulator)")
            elif access is not None:
                self.hazard(op, access,
                            f"the wgmma writes its accumulator into the registers of "
                            f"{access.value!r}, which the op ({access.op.name}) at line "
                            f"{_line(access.op)} read {self._since()}: wgmma.fence orders "
                            "other instructions' accesses to a wgmma's registers before it "
                            "(PTX ISA 'wgmma.fence'); call lk.sm90.wgmma_fence() after that read "
                            "and before the wgmma")
            access = self.write(v) if op.attrs["accumulate"] is not False and \
                not flags[i] else None
            if access is not None:
                self.hazard(op, access,
                            f"the wgmma accumulates into {v!r}, which the op ({access.op.name}) at "
                            f"line {_line(access.op)} wrote {self._since()}: the tensor cores see "
                            "registers other instructions wrote only after a wgmma.fence (PTX ISA "
                            "'wgmma.fence'); call lk.sm90.wgmma_fence() after that write and "
                            "before the wgmma")
        for v in register_a(op):
            access = self.write(v) or self.copy_or_read(facts.home.get(v.id))
            if access is not None:
                verb = "wrote" if access.what == "write" else "copied into"
                self.hazard(op, access,
                            f"the wgmma reads its register A operand {v!r}, which the op "
                            f"({access.op.name}) at line {_line(access.op)} {verb} "
                            f"{self._since()}: the tensor cores see registers other instructions "
                            "wrote only after a wgmma.fence (PTX ISA 'wgmma.fence'); call "
                            "lk.sm90.wgmma_fence() after that write and before the wgmma")
                break

    def mma(self, op: Op) -> None:
        s, facts = self.state, self.facts
        loop = self.loops[-1] if self.loops else None
        flags = facts.in_place(op)
        accs = accumulators(op)
        for v, in_place in zip(accs, flags):
            if facts.def_loop.get(v.id) is not loop and loop is not None:
                self.fail(op, f"the wgmma consumes {v!r}, defined outside the lk.range at line "
                              f"{_line(loop)}, once per iteration; carry the accumulator "
                              "through the loop (lk.range(..., carry=(acc,)) and loop.next)")
        self.fences(op, flags)
        for v, in_place in zip(accs, flags):
            producer = facts.def_op.get(v.id)
            if op.attrs["accumulate"] is True and producer is not None and \
                    producer.name == UNDEF:
                self.fail(op, f"the wgmma accumulates into {v!r}, an accumulator with undefined "
                              f"values (lk.sm90.wgmma_accumulator at line {_line(producer)}); pass "
                              "accumulate=False to the first wgmma, or start from lk.full")
        writes = bool(register_a(op)) or (op.attrs["accumulate"] is not False
                                          and not all(flags))
        if writes and any(issue.op is op for issue in s.in_flight()):
            what = "register A operand" if register_a(op) else "accumulator copies"
            self.fail(op, f"this wgmma writes its {what} again while its previous execution "
                          "may still run (a loop iteration without a covering wait); "
                          "lk.sm90.wgmma_wait for it before the next execution")
        self.serial += 1
        issue = Issue(op, self.serial)
        for v in accs:
            s.consumed[v.id] = op
            s.pending.pop(v.id, None)
        for r in op.results:
            s.pending[r.id] = issue
        for v in register_a(op):
            s.a_busy[v.id] = issue
        s.uncommitted.append(issue)

    def fence(self, op: Op) -> None:
        s = self.state
        s.dirty.clear()
        s.copied.clear()
        s.written.clear()
        s.last_fence, s.region_fence = op, None
        s.fence_tick = self.tick

    def commit(self, op: Op) -> None:
        s = self.state
        if s.uncommitted:
            s.groups.append(s.uncommitted)
            s.uncommitted = []

    def wait(self, op: Op) -> None:
        s = self.state
        keep = op.attrs["pending"]
        done = s.groups[:len(s.groups) - keep] if keep < len(s.groups) else []
        s.groups = s.groups[len(done):]
        finished = {id(issue) for group in done for issue in group}
        for group in done:
            for issue in group:
                waits = self.retired.setdefault(id(issue.op), [])
                if not any(w is op for w in waits):
                    waits.append(op)
        for table in (s.pending, s.a_busy):
            for vid in [vid for vid, issue in table.items() if id(issue) in finished]:
                del table[vid]

    def branch(self, op: Op):
        before = self.state.copy()
        for inner in op.blocks:
            yield from self.block(inner)
        after = self.state
        before.merge(after)
        if after.last_fence is not before.last_fence and op.name != "warp_role":
            tick = after.fence_tick                    # a fence that may not run
            if before.region_fence is None or before.region_fence[2] < tick:
                before.region_fence = (after.last_fence, op, tick)
        self.state = before

    def copy_into(self, home, access: Access) -> None:
        self.state.dirty[home] = self.state.copied[home] = access

    def loop(self, op: Op):
        body = op.blocks[0]
        for p, arg in enumerate(body.args[1:]):       # the entry copy of each carried value
            self.copy_into(("loop", id(op), p), Access(op, "copy", arg, self.tick))
        self.loops.append(op)
        try:
            yield from self.block(body)                # returns once the body is traced
            s = self.state
            local = _defined_in(body)
            for vid in local:                            # the next iteration redefines them
                for table in (s.pending, s.a_busy, s.consumed):
                    table.pop(vid, None)
            for p, arg in enumerate(body.args[1:]):
                if p in self.yielded:
                    s.pending[arg.id] = self.yielded[p]
            yield from self.block(body)
        finally:
            self.loops.pop()
        s = self.state
        for p, r in enumerate(op.results):
            if p in self.yielded:
                s.pending[r.id] = self.yielded[p]
        for vid in local:
            for table in (s.pending, s.a_busy):
                table.pop(vid, None)

    def yield_(self, op: Op) -> None:
        loop = self.loops[-1]
        self.yielded = {}
        for p, v in enumerate(op.operands):
            if v.id in self.state.pending:
                self.yielded[p] = self.state.pending[v.id]
            if self.facts.home.get(v.id) != ("loop", id(loop), p):
                self.copy_into(("loop", id(loop), p), Access(op, "copy", v, self.tick))


def _defined_in(block: Block) -> set[int]:
    found = {a.id for a in block.args}
    for op in block.ops:
        found.update(r.id for r in op.results)
        for inner in op.blocks:
            found |= _defined_in(inner)
    return found


def check(fn: Function, open_blocks=frozenset()) -> Checker:
    """Check `fn` against the rules of the module docstring; `open_blocks` (ids of blocks still
    being traced) are walked as far as traced, not as finished loops. Returns the checker (its
    `retired`, and its `warnings`: what could not be proven)."""
    return Checker(fn, open_blocks)


_TRACED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # Trace -> Checker | error


def check_traced(trace) -> None:
    """Raise the first error `check(trace.fn, open blocks)` raises on the IR traced so far, walking
    only the ops appended since the last call for this trace (lk.sm90.wgmma_wait checks at
    each wait; one walk per trace, not one per wait)."""
    found = _TRACED.get(trace)
    if isinstance(found, Exception):
        raise found                           # the walk stopped there: so would a new one
    try:
        if found is not None:
            found.facts.advance()
            if not found.facts.stale:
                found.advance()
                return
        found = _TRACED[trace] = Checker(trace.fn, trace.open)     # the live set of open blocks
        found.facts.stale = False
    except Exception as error:
        _TRACED[trace] = error
        raise


def final_check(fn: Function) -> Checker:
    """check(fn) of a finished kernel, remembered on `fn` while its IR is unchanged (the same
    value count and ops): check_kernel's walk, which the lowering reads again."""
    stamp = (fn._next_id, _count_ops(fn.body))
    found = getattr(fn, "_accumulator_check", None)
    if found is not None and found[0] == stamp:
        return found[1]
    checker = check(fn)
    fn._accumulator_check = (stamp, checker)
    return checker


def release_final_check(fn: Function) -> None:
    """Drop what final_check remembered on `fn` (once the lowering has read it)."""
    vars(fn).pop("_accumulator_check", None)


def _count_ops(block: Block) -> int:
    return sum(1 + sum(_count_ops(inner) for inner in op.blocks) for op in block.ops)


def check_kernel(fn: Function) -> Checker:
    """The whole-kernel check once the kernel body returned (before the protocol check, whose
    findings are often its consequences): raise the first error, warn what was not proven."""
    from ...check.protocol import ProtocolWarning
    checker = final_check(fn)
    for message, location in checker.warnings.values():
        warnings.warn_explicit(ProtocolWarning(f"kernel {fn.name}: the wgmma fence check "
                                               f"could not decide: {message}"),
                               ProtocolWarning, location.file if location else "<kernel>",
                               location.line if location else 0)
    return checker


def retiring_waits(fn: Function) -> list[tuple[Op, list[Op]]]:
    """(wgmma op, the wgmma_wait ops after which it has completed) for each wgmma of `fn`: its
    shared operands are read, and its registers written, until then."""
    checker = check(fn)
    out = []

    def walk(block):
        for op in block.ops:
            if op.name == MMA:
                out.append((op, checker.retired.get(id(op), [])))
            for inner in op.blocks:
                walk(inner)
    walk(fn.body)
    return out


__all__ = ["AccumulatorUseError", "Facts", "check", "check_kernel", "check_traced", "final_check",
           "release_final_check",
           "retiring_waits", "accumulators", "register_a"]
