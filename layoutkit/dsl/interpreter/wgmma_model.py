"""The interpreter's model of wgmma (its ops' interpret facets, layoutkit.dsl.sm90.wgmma.ops,
run on it): one execution per warpgroup, its shared-operand claims and its retirement.

A wgmma is one execution per warpgroup: the 128 threads each contribute their accumulator and
register-A values (a thread goes on at once, as on the GPU); the last to arrive computes the
result (wgmma_math: the PTX fragments, descriptors and swizzle). Until a thread's
`wgmma_wait` retires the group, its result registers hold `Pending` values: reading one is a
RaceError at the reading op, chaining it into the next wgmma is fine. From the first thread's
issue until every thread of the warpgroup has retired it, the shared operands are claimed:
a TMA load or a store into them meanwhile is a RaceError, and afterwards a writer must be
ordered after the last retiring thread (happens-before records the operand reads there).
`wgmma_undef` values are `Undefined`; accumulating into one is an error. Commit groups count
as in PTX (an empty one too); a thread that exits with a wgmma not committed, or committed and
not retired by a wait, is an ExecutionError at the wgmma in the static check's words
(layoutkit.sync.wgmma_rules). The first wgmma of a
thread must follow an `lk.sm90.wgmma_fence()` (PTX ISA "wgmma.fence"); later fences are the trace-
time protocol's to check (sm90/wgmma/accumulators.py), which knows which registers other
instructions wrote.
"""
from __future__ import annotations

import itertools

import numpy as np

from layoutkit.sync.wgmma_rules import in_flight_text, uncommitted_text

from .collective import meet_warp
from .errors import ExecutionError
from .machine import Wait, WaitQueue, location_text
from .unavailable import Pending, Undefined
from .warpgroup_model import run_at_exit
from ..core.types import DTYPES
from .wgmma_math import (M_BLOCK, WARPGROUP, accumulator_bits, byte_runs, fragment, k_step,
                         multiply, operand_addresses, read_elements)


class WgmmaExecution:
    """One warpgroup's execution of a wgmma op: the shared bytes it reads (`runs`, claimed),
    the threads' contributions, the per-thread `results` once `computed`, who `retired` it."""

    def __init__(self, op, cta, group: int, origins: tuple, flag):
        self.op, self.cta, self.group, self.origins, self.flag = op, cta, group, origins, flag
        self.pending = [Pending(self, i) for i in range(len(op.results))]
        self.queue = WaitQueue(cta.machine.scheduler)
        self.computed = False
        self.results: dict = {}
        self.retired: set = set()
        self.addresses = self._addresses()
        nbytes = DTYPES[op.attrs["dtype"]].nbytes          # fp8 mixes only with fp8: one size
        self.runs = byte_runs([x for table in self.addresses.values() for x in table.values()],
                              nbytes) if self.addresses else []
        self.claims: list = []

    def describe(self) -> str:
        return f"the wgmma issued at {location_text(self.op)} by warpgroup {self.group}"

    def _addresses(self) -> dict:
        a = self.op.attrs
        out, origins = {}, list(self.origins)
        if a["a"]["kind"] == "shared":
            out["a"] = operand_addresses(a["a"], origins.pop(0), M_BLOCK, a["dtype"])
        out["b"] = operand_addresses(a["b"], origins.pop(0), a["n"], a["b_dtype"])
        return out


class CommitGroup:
    """A thread's committed wgmma group: the commit op, its number among the thread's commits,
    the executions it holds (none for an empty group)."""

    __slots__ = ("commit", "number", "executions")

    def __init__(self, commit, number: int, executions: list):
        self.commit, self.number, self.executions = commit, number, executions


def wgmma_state(thread) -> dict:
    """The thread's wgmma state: fenced yet, executions issued, the open (uncommitted)
    executions, the committed groups in flight (CommitGroups, oldest first), the number of
    commits and the last wait (op, pending, commits before it)."""
    state = thread.state.get("wgmma")
    if state is None:
        state = thread.state["wgmma"] = {"fenced": False, "issued": 0, "open": [],
                                         "groups": [], "commits": 0, "last_wait": None}
        run_at_exit(thread, check_exit)
    return state


def commit_group(thread, op) -> None:
    """wgmma.commit_group: the thread's open executions become one group (maybe empty)."""
    state = wgmma_state(thread)
    state["commits"] += 1
    state["groups"].append(CommitGroup(op, state["commits"], state["open"]))
    state["open"] = []


def wait_groups(thread, op, keep: int):
    """wgmma.wait_group `keep`: retire all but the newest `keep` groups (a generator of Waits,
    see retire_all), or None when the thread has no wgmma state."""
    state = thread.state.get("wgmma")
    if state is None:
        return None
    groups = state["groups"]
    done = groups[:max(len(groups) - keep, 0)]
    del groups[:len(done)]
    state["last_wait"] = (op, keep, state["commits"])
    return retire_all(thread, [e for group in done for e in group.executions], op)


def check_exit(thread) -> None:
    """A thread exits: no wgmma of it may be uncommitted or in flight (module docstring)."""
    state = thread.state.get("wgmma")
    if state is None:
        return
    who = thread.describe()
    if state["open"]:
        issue = state["open"][0].op
        raise ExecutionError(uncommitted_text(who, location_text(issue)), issue.location)
    group = next((g for g in state["groups"] if g.executions), None)
    if group is None:
        return
    issue, last = group.executions[0].op, state["last_wait"]
    waited = (location_text(last[0]), last[1]) if last and last[2] >= group.number else None
    raise ExecutionError(in_flight_text(who, location_text(issue), location_text(group.commit),
                                        waited), issue.location)


def operand_ids(op):
    """Value ids: (accumulators, register A values, shared origins, accumulate flag or None)."""
    a = op.attrs
    ids = [v.id for v in op.operands]
    count, a_count = a["acc_count"], a["a_count"]
    acc, regs, rest = ids[:count], ids[count:count + a_count], ids[count + a_count:]
    origins = 2 if a["a"]["kind"] == "shared" else 1
    flag = rest[origins] if a["accumulate"] is None else None
    return acc, regs, rest[:origins], flag


def claim_operands(execution: WgmmaExecution, what: str) -> None:
    shared = execution.cta.shared
    buffers = [execution.op.attrs[k]["buffer"] for k in ("a", "b")
               if execution.op.attrs[k]["kind"] == "shared"]
    for start, nbytes in execution.runs:
        shared.check_access(start, nbytes, 1, False, what, execution.op)
    for start, nbytes in execution.runs:
        execution.claims.append(shared.claim(
            start, nbytes, False, f"{execution.describe()} (reading {', '.join(buffers)})",
            "lk.sm90.wgmma_wait(n) covering it in every thread of the warpgroup before overwriting "
            "its operands (arrive on the stage's empty barrier after that wait)"))


def _value(x, tid: int, op, accumulating: bool):
    if isinstance(x, Pending):
        return x.instance.results[tid][x.index]
    if isinstance(x, Undefined):
        if accumulating:
            raise ExecutionError(
                f"the wgmma accumulates into an accumulator with undefined values "
                f"(lk.sm90.wgmma_accumulator at line {x.line}) in thread {tid} of the warpgroup; "
                "the first wgmma into it must run with accumulate false", op.location)
        return 0.0
    return x


def _all_registers(rows: list) -> bool:
    """Whether every value of the threads' `rows` is a float register value (numpy converts
    them at once: no Pending to resolve, no Undefined to refuse)."""
    return set(map(type, itertools.chain.from_iterable(rows))) <= _REGISTER_FLOATS


_REGISTER_FLOATS = {np.float32, np.float16}


def compute(execution: WgmmaExecution, rendezvous) -> None:
    """Run the instructions of the op for the whole warpgroup (the last arrival does it)."""
    op, a = execution.op, execution.op.attrs
    m, n, kdim = a["m"], a["n"], a["k"]
    kstep = k_step(a["dtype"])
    blocks, ksteps = m // M_BLOCK, kdim // kstep
    first = execution.group * WARPGROUP
    tids = range(first, first + WARPGROUP)
    accumulating = execution.flag
    rows, cols = fragment(m, n)
    d = None
    if accumulating:
        d = np.zeros((m, n), dtype=np.float64)
        given = [rendezvous.arrivals[t][0] for t in tids]
        if not _all_registers(given):            # a Pending or Undefined among them
            given = [[_value(x, t, op, True) for x in row] for t, row in zip(tids, given)]
        d[rows, cols] = np.array(given, dtype=np.float64)
    shared = execution.cta.shared.data
    if a["a"]["kind"] == "registers":
        tile = np.zeros((m, kdim), dtype=np.float64)
        arows, acols = fragment(m, kdim)
        given = [rendezvous.arrivals[t][1] for t in tids]
        if not _all_registers(given):
            given = [[float(x) for x in row] for row in given]    # an unavailable one refuses
        tile[arows, acols] = np.array(given, dtype=np.float64)
        a_blocks = {(b, j): tile[M_BLOCK * b:M_BLOCK * (b + 1), kstep * j:kstep * (j + 1)]
                    for b in range(blocks) for j in range(ksteps)}
    else:
        a_blocks = {key: read_elements(shared, x, a["dtype"])
                    for key, x in execution.addresses["a"].items()}
    b_steps = {j: read_elements(shared, x, a["b_dtype"])
               for (_, j), x in execution.addresses["b"].items()}
    out = multiply(d, a_blocks, b_steps, blocks, ksteps, accumulator_bits(a["dtype"]))
    per_thread = out[rows, cols].astype(np.float32)
    for i, t in enumerate(tids):
        execution.results[t] = list(per_thread[i])
    execution.computed = True
    execution.queue.notify()


class ExecutionWait(Wait):
    """A thread at wgmma_wait until the warpgroup's execution has been computed."""

    def __init__(self, execution: WgmmaExecution, op):
        self.execution, self.op, self.queue = execution, op, execution.queue

    def ready(self) -> bool:
        return self.execution.computed

    def describe(self) -> str:
        return f"waits at wgmma.wait_group for {self.execution.describe()}, which not every " \
               "thread of the warpgroup has issued"


# ops whose results are computed from their operands' values, which a Pending refuses: no
# result of theirs holds a copy of one
_COMPUTING = frozenset({"binary", "fma", "unary", "cast", "cmp", "index", "const", "load",
                        "shared_load", "ldmatrix", "dsmem_load", "thread_idx", "block_idx",
                        "special_reg"})


def _forwarding(machine) -> list:
    """(inputs, outputs) of every op that may copy a value: its operands and its blocks' yields'
    operands; its results and its blocks' arguments (a loop: per carried value; once per
    run)."""
    known = machine.state.get("wgmma_forwarding")
    if known is None:
        known = machine.state["wgmma_forwarding"] = []

        def walk(block):
            for op in block.ops:
                if op.name == "for":        # carried value i: init i, yield i -> arg i, result i
                    body, inits = op.blocks[0], op.operands[3:]
                    nexts = body.ops[-1].operands
                    for init, arg, out, nxt in zip(inits, body.args[1:], op.results, nexts):
                        known.append(({init.id, nxt.id}, {arg.id, out.id}))
                elif op.name not in _COMPUTING:
                    inputs = {v.id for v in op.operands}
                    outputs = {r.id for r in op.results}
                    for inner in op.blocks:
                        outputs.update(a.id for a in inner.args)
                        for end in inner.ops:
                            if end.name == "yield":
                                inputs.update(v.id for v in end.operands)
                    if outputs:
                        known.append((inputs, outputs))
                for inner in op.blocks:
                    walk(inner)
        walk(machine.fn.body)
    return known


def copy_targets(machine, op) -> tuple:
    """The value ids that may hold a result of the wgmma `op` (its results, and what copies
    them: a fixpoint over _forwarding), once per op and run."""
    cache = machine.state.setdefault("wgmma_copy_targets", {})
    known = cache.get(id(op))
    if known is None:
        tainted = {r.id for r in op.results}
        changed = True
        while changed:
            changed = False
            for inputs, outputs in _forwarding(machine):
                if not outputs <= tainted and not tainted.isdisjoint(inputs):
                    tainted |= outputs
                    changed = True
        known = cache[id(op)] = tuple(tainted)
    return known


def _retire(thread, execution: WgmmaExecution) -> None:
    """The thread's registers take the results; the last thread of the warpgroup frees the
    shared operands."""
    values, env = execution.results[thread.tid], thread.env
    targets = copy_targets(thread.cta.machine, execution.op)
    if len(targets) < len(env):
        for key, x in zip(targets, map(env.get, targets)):
            if type(x) is Pending and x.instance is execution:
                env[key] = values[x.index]
    else:
        for key, x in env.items():
            if type(x) is Pending and x.instance is execution:
                env[key] = values[x.index]
    if thread.yielded:
        thread.yielded = [values[x.index] if type(x) is Pending and x.instance is execution
                          else x for x in thread.yielded]
    execution.retired.add(thread.tid)
    if len(execution.retired) < WARPGROUP:
        return
    cta = execution.cta
    for claim in execution.claims:
        cta.shared.release(claim)
    hb = cta.machine.hb
    if hb is not None:        # the operands were read until now
        for start, nbytes in execution.runs:
            hb.access(thread, start, nbytes, False, execution.describe(), execution.op)
    executions = cta.state["wgmma"]
    for key in [k for k, v in executions.items() if v is execution]:
        del executions[key]


def retire_all(thread, executions: list, op):
    """wgmma.wait_group is .sync.aligned: the warp's lanes pass it together. So the lanes meet
    (a warp rendezvous) once the groups are computed, and the last to arrive retires the
    groups for all of them and joins their clocks: a lane going on (an elected lane arriving
    on an empty barrier) has seen every lane's retirement."""
    for execution in executions:
        while not execution.computed:
            yield ExecutionWait(execution, op)

    def finish(warp, arrivals):
        for member in warp.threads:
            for execution in arrivals[member.lane]:
                _retire(member, execution)
        hb = thread.cta.machine.hb
        if hb is not None:
            hb.synchronize(warp.threads, warp.threads)

    met = meet_warp(thread, op, "wgmma.wait_group", executions, finish)
    while not met.complete:
        yield met


__all__ = ["WgmmaExecution", "ExecutionWait", "CommitGroup", "check_exit", "claim_operands",
           "commit_group", "compute", "operand_ids", "retire_all", "wait_groups", "wgmma_state"]
