"""The wgmma ops of the IR, one definition each: wgmma, wgmma_fence, wgmma_commit, wgmma_wait,
wgmma_undef (sm_90a). The user API that emits them is `mma.py` (its docstring lists their
operands and attrs); the accumulator-use rules they obey are `accumulators.py`.

Lowering. Accumulators stay in place: a result takes its operand's (mutable) registers when
the in-place rule allows (accumulators.Facts.in_place); otherwise it gets fresh registers,
filled by copies (none when the wgmma does not accumulate). Copies and the packing of a
register A operand into .b32 pairs (low half = even value, PTX register fragments) are register
writes, so a `wgmma.fence` follows them. A descriptor is built once per operand from its runtime
start address (smem + buffer + origin) and advanced by a constant per instruction.

Interpretation (interpreter/wgmma_model.py holds the model): one execution per warpgroup, its
result registers `Pending` until a covering wgmma_wait, its shared operands claimed until every
thread of the warpgroup has retired it; a thread's first wgmma must follow a wgmma_fence.

Effects (the protocol check): a wgmma is issued (layoutkit.sync.wgmma_rules.WgmmaIssue) and
reads its shared operands through the async proxy; the fence is a WgmmaFence; commit and wait
close and retire the warpgroup's groups. All four are warpgroup-collective (.sync.aligned):
each emits a PartialWarpgroup for the warpgroups only some of whose threads execute it, and a
warning where an enclosing lk.if_ / lk.range depends on memory (whether the whole warpgroup
runs it is then not known). An undefined accumulator has no effects. The fences after register
writes are the accumulator checker's (accumulators.py).
"""
from __future__ import annotations

import numpy as np

from layoutkit.algebra import cosize
from layoutkit.ptx.builder import Reg
from layoutkit.ptx.isa import arith, convert
from layoutkit.ptx.isa import wgmma as isa
from layoutkit.ptx.isa import wgmma_descriptor as descriptors
from layoutkit.sync import kernel_model as km
from layoutkit.sync import wgmma_rules

from ...check.values import UNKNOWN
from ...core.opdef import SM90A_ONLY, NoEffects, OpDef
from ...core.types import DTYPES, bool_, f32, i32
from ...core.verifier import fail
from ...interpreter.collective import arrive
from ...interpreter.errors import DivergenceError, ExecutionError
from ...interpreter.executor import Step
from ...interpreter.machine import location_text
from ...interpreter.unavailable import Undefined
from ...interpreter.warpgroup_model import warpgroup_collective
from ...interpreter.wgmma_model import (WgmmaExecution, claim_operands, commit_group, compute,
                                        operand_ids, wait_groups, wgmma_state)
from .accumulators import final_check, register_a
from .layouts import M_BLOCK, WARPGROUP, k_step



def _verify_plain(op) -> None:
    if op.operands or op.results:
        fail(op, "takes no operands and has no results")


# ---- lowering helpers ------------------------------------------------------------------------
def _facts(lw):
    """The accumulator check of the whole function (once per lowering), and its facts."""
    facts = getattr(lw, "_wgmma_checked_facts", None)
    if facts is None:
        facts = lw._wgmma_checked_facts = final_check(lw.fn).facts
    return facts


def _descriptor_base(lw, spec: dict, origin, nbytes: int):
    """The descriptor of the operand's element `origin` (its tile origin)."""
    k = lw.k
    offset = lw.operand(origin)
    if isinstance(offset, int):
        address = arith.add(k, lw.smem, spec["base"] + offset * nbytes, dtype="u32")
    else:
        if offset.type.name != "u32":
            offset = convert.mov(k, offset, dtype="b32", out=k.reg("u32"))
        address = arith.mad(k, offset, nbytes, lw.smem, mode="lo", dtype="u32")
        if spec["base"]:
            address = arith.add(k, address, spec["base"], dtype="u32")
    return descriptors.make_descriptor(k, address, lbo=spec["lbo"], sbo=spec["sbo"],
                                       swizzle=spec["mode"])


def _descriptors(lw, spec: dict, origin, nbytes: int) -> dict:
    """(block, kstep) -> descriptor register of each instruction."""
    base = _descriptor_base(lw, spec, origin, nbytes)
    out = {}
    for block, kstep, start in spec["starts"]:
        out[(block, kstep)] = base if start == 0 else \
            descriptors.advance_descriptor(lw.k, base, start * nbytes)
    return out


def _accumulator_registers(lw, op, facts) -> tuple[list[Reg], bool]:
    """The registers the wgmma writes, and whether filling them wrote registers."""
    k, a = lw.k, op.attrs
    flags = facts.in_place(op)
    regs, wrote = [], False
    for v, in_place in zip(op.operands[:a["acc_count"]], flags):
        src = lw.vals[v.id]
        if in_place and isinstance(src, Reg) and src.mutable:
            regs.append(src)
            continue
        var = k.var("f32")
        if a["accumulate"] is not False:
            convert.mov(k, src, dtype="f32", out=var)
            wrote = True
        regs.append(var)
    return regs, wrote


def _register_a(lw, op, blocks: int, ksteps: int) -> dict:
    """(block, kstep) -> the 4 .b32 registers packing that instruction's A values."""
    values = [lw.reg(v) for v in register_a(op)]
    per_block = op.attrs["k"] // 2                    # values of one row block, all k-steps
    per_step = 2 * isa.A_REGISTERS                     # values of one instruction
    out = {}
    for b in range(blocks):
        for j in range(ksteps):
            first = b * per_block + per_step * j
            out[(b, j)] = tuple(convert.pack(lw.k, values[first + 2 * q:first + 2 * q + 2])
                                for q in range(isa.A_REGISTERS))
    return out


# ---- effects helpers -------------------------------------------------------------------------
COLLECTIVE = {"wgmma": "lk.sm90.wgmma", "wgmma_fence": "lk.sm90.wgmma_fence()",
              "wgmma_commit": "lk.sm90.wgmma_commit()", "wgmma_wait": "lk.sm90.wgmma_wait()"}


def _guards(ex) -> dict:
    """op id -> the lk.if_ / lk.range ops enclosing each wgmma-family op (once per check)."""
    found = getattr(ex, "_wgmma_guards", None)
    if found is None:
        found = ex._wgmma_guards = {}

        def walk(block, stack):
            for op in block.ops:
                if op.name in COLLECTIVE:
                    found[id(op)] = stack
                if op.blocks:
                    inner = stack + (op,) if op.name in ("if", "for") else stack
                    for b in op.blocks:
                        walk(b, inner)
        walk(ex.fn.body, ())
    return found


def _collective(op, ex, mask, loops) -> None:
    """The whole-warpgroup rule (module docstring): a PartialWarpgroup for the warpgroups only
    some threads of `mask` belong to; a warning when an enclosing condition is unknown."""
    what = COLLECTIVE[op.name]
    groups = mask.reshape(-1, WARPGROUP)
    counts = groups.sum(axis=1)
    partial = np.nonzero((counts > 0) & (counts < WARPGROUP))[0]
    if partial.size:
        per_cta = ex.block_threads // WARPGROUP
        parts = tuple((int(g) // per_cta, int(g) % per_cta,
                       tuple(int(t) for t in ex.tid[g * WARPGROUP:(g + 1) * WARPGROUP][groups[g]]))
                      for g in partial)
        sub = mask & np.repeat(counts < WARPGROUP, WARPGROUP)
        ex.emit(sub, wgmma_rules.PartialWarpgroup,
                {"what": what, "site": ex.site(op, loops), "groups": parts})
    warned = getattr(ex, "_wgmma_warned", None)
    if warned is None:
        warned = ex._wgmma_warned = set()        # guards warned about: once each
    for guard in _guards(ex)[id(op)]:
        operands = guard.operands[:1] if guard.name == "if" else guard.operands[:3]
        if id(guard) not in warned and any(ex.values(v) is UNKNOWN for v in operands):
            warned.add(id(guard))
            region, value = ("lk.if_", "its condition") if guard.name == "if" else \
                ("lk.range", "its trip count")
            line = guard.location.line if guard.location is not None else "?"
            ex.undecidable(op, loops, f"whether all {WARPGROUP} threads of each warpgroup "
                           f"execute the wgmma ops inside the {region} at line {line} (here "
                           f"{what}) together could not be proven: {value} depends on values "
                           "loaded from memory (wgmma ops are warpgroup-collective, PTX "
                           ".sync.aligned)")


class Wgmma(OpDef):
    """wgmma.mma_async over an (m, n, k) tile: m/64 row blocks times k/16 k-steps of
    instructions, the accumulator in place (see the module docstring)."""

    name = "wgmma"
    targets = SM90A_ONLY
    synchronizes = True

    def verify(self, op):
        a = op.attrs
        count, a_count = a["acc_count"], a["a_count"]
        m, n, k = a["m"], a["n"], a["k"]
        if count != m * n // WARPGROUP or len(op.results) != count or \
                any(v.type != f32 for v in (*op.operands[:count], *op.results)):
            fail(op, f"an m{m}n{n} accumulator is {m * n // WARPGROUP} f32 values in and out")
        rest = list(op.operands[count:])
        if a["a"]["kind"] == "registers":
            regs, rest = rest[:a_count], rest[a_count:]
            if a_count != m * k // WARPGROUP or any(v.type.name != a["dtype"] for v in regs):
                fail(op, f"a register A operand is {m * k // WARPGROUP} {a['dtype']} values")
        elif a_count != 0:
            fail(op, "a shared A operand has no register values")
        origins = 2 if a["a"]["kind"] == "shared" else 1
        expected = origins + (1 if a["accumulate"] is None else 0)
        if len(rest) != expected or any(v.type != i32 for v in rest[:origins]) or \
                (a["accumulate"] is None and rest[-1].type != bool_):
            fail(op, "after the registers come the i32 shared origins, then the bool "
                     "accumulate operand when accumulate is None")

    def lower(self, op, lw):
        k, a = lw.k, op.attrs
        facts = _facts(lw)
        m, n, kdim = a["m"], a["n"], a["k"]
        dtype = DTYPES[a["dtype"]]
        nbytes = dtype.nbytes
        blocks, ksteps = m // M_BLOCK, kdim // k_step(dtype)
        acc, wrote = _accumulator_registers(lw, op, facts)
        rest = list(op.operands[a["acc_count"] + a["a_count"]:])
        if a["a"]["kind"] == "registers":
            a_regs = _register_a(lw, op, blocks, ksteps)
            wrote = True
        else:
            a_regs = _descriptors(lw, a["a"], rest.pop(0), nbytes)
        b_desc = _descriptors(lw, a["b"], rest.pop(0), nbytes)
        if a["accumulate"] is None:
            flag = lw.operand(rest.pop(0))
            first_scale = (1 if flag else 0) if isinstance(flag, bool) else flag
        else:
            first_scale = 1 if a["accumulate"] else 0
        if wrote:
            isa.fence(k)          # the copies/packs above are register writes (PTX wgmma.fence)
        trans_a = None if a["a"]["kind"] == "registers" else (0 if a["a"]["major"] == "K" else 1)
        trans_b = 0 if a["b"]["major"] == "K" else 1
        per_acc = isa.accumulator_count(n)
        for j in range(ksteps):
            for b in range(blocks):
                isa.mma_async(k, acc[b * per_acc:(b + 1) * per_acc], a_regs[(b, j)],
                              b_desc[(0, j)], n=n, ab_type=a["dtype"], b_type=a["b_dtype"],
                              scale_d=first_scale if j == 0 else 1, trans_a=trans_a,
                              trans_b=trans_b)
        for r, reg in zip(op.results, acc):
            lw.vals[r.id] = reg

    def interpret(self, op, compiler):
        acc_ids, reg_ids, origin_ids, flag_id = operand_ids(op)
        results = [r.id for r in op.results]
        static_flag = op.attrs["accumulate"]
        what = f"the wgmma at {location_text(op)}"

        def run(thread):
            warpgroup_collective(thread, op, COLLECTIVE[op.name])
            cta, env = thread.cta, thread.env
            state = wgmma_state(thread)
            if not state["fenced"]:
                raise ExecutionError(
                    "this wgmma is the thread's first, and no lk.sm90.wgmma_fence() ran before it: "
                    "registers written by other instructions are not yet visible to the tensor "
                    "cores (PTX ISA 'wgmma.fence': required before the first wgmma)",
                    op.location)
            group = thread.tid // WARPGROUP
            key = ("wgmma", group, state["issued"])
            origins = tuple(env[v] for v in origin_ids)
            flag = static_flag if flag_id is None else bool(env[flag_id])
            executions = cta.state.setdefault("wgmma", {})
            execution = executions.get(key)
            if execution is None:
                execution = executions[key] = WgmmaExecution(op, cta, group, origins, flag)
                claim_operands(execution, what)
            elif execution.op is op and (execution.origins, execution.flag) != (origins, flag):
                raise DivergenceError(
                    f"thread {thread.tid} issues this wgmma with shared origins {origins} and "
                    f"accumulate={flag}, but its warpgroup's first thread gave "
                    f"{execution.origins} and accumulate={execution.flag}: the operands of a "
                    "wgmma are the whole warpgroup's (PTX .sync.aligned)", op.location)
            hb = cta.machine.hb
            if hb is not None and thread.lane == 0:       # each warp reads the operands
                for start, nbytes in execution.runs:
                    hb.access(thread, start, nbytes, False, what, op)
            payload = ([env[v] for v in acc_ids], [env[v] for v in reg_ids])
            members = cta.threads[group * WARPGROUP:(group + 1) * WARPGROUP]
            arrive(thread, key, members, op, "wgmma", payload,
                   lambda rendezvous: compute(execution, rendezvous))
            state["issued"] += 1
            state["open"].append(execution)
            for r, pending in zip(results, execution.pending):
                env[r] = pending
        return Step(run, op, preempt=True)

    def effects(self, op, ex, mask, loops):
        _collective(op, ex, mask, loops)
        ex.emit(mask, wgmma_rules.WgmmaIssue, {"site": ex.site(op, loops)})
        a = op.attrs
        nbytes = DTYPES[a["dtype"]].nbytes
        position = a["acc_count"] + a["a_count"]
        for operand in ("a", "b"):
            spec = a[operand]
            if spec["kind"] != "shared":
                continue
            span = int(cosize(spec["layout"])) * nbytes
            ex.shared_access(op, mask, loops, op.operands[position], nbytes, span, spec["buffer"],
                      km.SharedRead, "wgmma")
            position += 1


class WgmmaFence(OpDef):
    """wgmma.fence: register writes before it are seen by the wgmmas after it."""

    name = "wgmma_fence"
    targets = SM90A_ONLY
    synchronizes = True

    def effects(self, op, ex, mask, loops):
        _collective(op, ex, mask, loops)
        ex.emit(mask, wgmma_rules.WgmmaFence, {"site": ex.site(op, loops)})

    def verify(self, op):
        _verify_plain(op)

    def lower(self, op, lw):
        _facts(lw)
        isa.fence(lw.k)

    def interpret(self, op, compiler):
        def run(thread):
            warpgroup_collective(thread, op, COLLECTIVE[op.name])
            wgmma_state(thread)["fenced"] = True
        return Step(run, op)


class WgmmaCommit(OpDef):
    """wgmma.commit_group: the warpgroup's wgmmas since the last commit become one group."""

    name = "wgmma_commit"
    targets = SM90A_ONLY
    synchronizes = True

    def verify(self, op):
        _verify_plain(op)

    def lower(self, op, lw):
        isa.commit_group(lw.k)

    def interpret(self, op, compiler):
        def run(thread):
            warpgroup_collective(thread, op, COLLECTIVE[op.name])
            commit_group(thread, op)
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        _collective(op, ex, mask, loops)
        ex.emit(mask, km.Commit, {"kind": "wgmma", "site": ex.site(op, loops)})


class WgmmaWait(OpDef):
    """wgmma.wait_group `pending`: at most that many committed groups stay in flight."""

    name = "wgmma_wait"
    targets = SM90A_ONLY
    synchronizes = True

    def verify(self, op):
        pending = op.attrs.get("pending")
        if op.operands or op.results or isinstance(pending, bool) or \
                not isinstance(pending, int) or not 0 <= pending <= isa.MAX_PENDING_GROUPS:
            fail(op, "takes no operands, has no results and pending in "
                     f"0..{isa.MAX_PENDING_GROUPS}")

    def lower(self, op, lw):
        isa.wait_group(lw.k, op.attrs["pending"])

    def interpret(self, op, compiler):
        keep = op.attrs["pending"]

        def run(thread):
            warpgroup_collective(thread, op, COLLECTIVE[op.name])
            return wait_groups(thread, op, keep)
        return Step(run, op)

    def effects(self, op, ex, mask, loops):
        _collective(op, ex, mask, loops)
        ex.emit(mask, km.GroupWait, {"kind": "wgmma", "pending": op.attrs["pending"],
                                     "site": ex.site(op, loops)})


class WgmmaUndef(NoEffects, OpDef):
    """An accumulator in `layout` with undefined values (no instructions; accumulating into
    it is an error)."""

    name = "wgmma_undef"
    targets = SM90A_ONLY

    def verify(self, op):
        layout = op.attrs.get("layout")
        if op.operands or layout is None or len(op.results) != layout.num_values or \
                any(r.type != f32 for r in op.results):
            fail(op, "gives one f32 per value of its layout and takes no operands")

    def lower(self, op, lw):
        for r in op.results:
            lw.vals[r.id] = lw.k.var("f32")     # read before written: undefined (ptx.builder)

    def interpret(self, op, compiler):
        line = op.location.line if op.location is not None else "?"
        results = [r.id for r in op.results]
        value = Undefined(line)

        def run(thread):
            env = thread.env
            for r in results:
                env[r] = value
        return Step(run, op)


__all__ = ["Wgmma", "WgmmaFence", "WgmmaCommit", "WgmmaWait", "WgmmaUndef"]
