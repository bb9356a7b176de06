"""The scalar ops of the IR, one definition each: parameters, thread and block indices,
constants, integer index expressions, arithmetic, comparisons, logic, select, casts, and
runtime integers made kernel integers (`index_value`).

Each runs on one value per thread. Lowering maps values to PTX registers (or immediates for
integer/f32/f64 constants); the interpreter follows PTX numerics (layoutkit.dsl.interpreter
.numerics); the protocol check evaluates the integer and bool ones over all threads
(`check_value`), so conditions built from them are decided exactly.
"""
from __future__ import annotations

import numpy as np

from layoutkit.ptx.builder import Reg
from layoutkit.ptx.isa import arith, bits, compare, convert, memory, special
from layoutkit.ptx.isa import transcendental as sfu

from ..check.values import CHECK_BINARY, CHECK_CMP, Unevaluable, compile_expr
from ..core.opdef import UNKNOWN, NoEffects, OpDef
from ..core.types import DType, PointerType, TensorMapType, bool_, i32, i64
from ..core.verifier import BINARY, CMP, UNARY, fail, same_type
from ..interpreter import numerics
from ..interpreter.errors import DivergenceError, ExecutionError
from ..interpreter.executor import Step
from ..interpreter.index_eval import compile_index
from ..lower.function import half_bits, static_cmp
from . import fp8_convert


def _ids(values) -> tuple[int, ...]:
    return tuple(v.id for v in values)


class Param(NoEffects, OpDef):
    """A kernel parameter (`index` its position; None for a hidden one, with `resolve` and `what`);
    lowered with the kernel's signature, bound by the launch."""

    name = "param"

    def verify(self, op):
        if op.operands or len(op.results) != 1:
            fail(op, "takes no operands and has one result")

    def lower(self, op, lw):
        k, value = lw.k, op.results[0]
        if isinstance(value.type, TensorMapType):   # used by address, never loaded
            lw.vals[value.id] = k.tensormap_param(op.attrs["name"])
            return
        ptype = "u64" if isinstance(value.type, PointerType) else value.type.ptx
        param = k.param(op.attrs["name"], ptype if ptype not in ("bf16", "f16") else "b16")
        lw.vals[value.id] = memory.ld_param(k, param)

    def interpret(self, op, compiler):
        raise ExecutionError(f"parameter {op.attrs['name']} appears inside a block; the launch "
                             "binds parameters (Function.params), no block holds one",
                             op.location)


class ThreadIdx(NoEffects, OpDef):
    """%tid.<axis> (i32)."""

    name = "thread_idx"

    def verify(self, op):
        if op.operands or len(op.results) != 1 or op.results[0].type != i32 or \
                op.attrs.get("axis") not in (0, 1, 2):
            fail(op, "takes no operands and gives an i32, with axis 0, 1 or 2")

    def lower(self, op, lw):
        lw.define(op, special.sreg(lw.k, "tid." + "xyz"[op.attrs["axis"]]))

    def interpret(self, op, compiler):
        r, axis = op.results[0].id, op.attrs["axis"]

        def run(thread):
            thread.env[r] = thread.tid if axis == 0 else 0     # blocks are (32 * num_warps, 1, 1)
        return Step(run, op)


class BlockIdx(NoEffects, OpDef):
    """%ctaid.<axis> (i32)."""

    name = "block_idx"

    def verify(self, op):
        if op.operands or len(op.results) != 1 or op.results[0].type != i32 or \
                op.attrs.get("axis") not in (0, 1, 2):
            fail(op, "takes no operands and gives an i32, with axis 0, 1 or 2")

    def lower(self, op, lw):
        lw.define(op, special.sreg(lw.k, "ctaid." + "xyz"[op.attrs["axis"]]))

    def interpret(self, op, compiler):
        r, axis = op.results[0].id, op.attrs["axis"]

        def run(thread):
            thread.env[r] = thread.cta.coord[axis]
        return Step(run, op)


class Const(NoEffects, OpDef):
    """A constant `value` of the result's type."""

    name = "const"

    def verify(self, op):
        if op.operands or len(op.results) != 1:
            fail(op, "takes no operands and has one result")

    def lower(self, op, lw):
        t, value = op.results[0].type, op.attrs["value"]
        if t == bool_:
            lw.define(op, bool(value))
        elif t.name in ("f16", "bf16"):
            lw.define(op, convert.mov(lw.k, half_bits(float(value), t.name), dtype="b16",
                                        out=lw.k.reg(t.ptx)))
        else:
            lw.define(op, value)

    def interpret(self, op, compiler):
        r = op.results[0].id
        value = numerics.to_dtype(op.attrs["value"], op.results[0].type)

        def run(thread):
            thread.env[r] = value
        return Step(run, op)

    def check_value(self, op, args):
        v = op.attrs["value"]
        return v if isinstance(v, (bool, int)) else UNKNOWN


class Index(NoEffects, OpDef):
    """An integer expression `expr` (sympy) over the values bound to its free symbols `syms`."""

    name = "index"

    def verify(self, op):
        if len(op.results) != 1 or op.results[0].type not in (i32, i64) or \
                len(op.operands) != len(op.attrs["syms"]):
            fail(op, "gives an i32/i64 and binds one operand per free symbol of expr")
        if any(not isinstance(v.type, DType) or not v.type.is_int for v in op.operands):
            fail(op, "binds integer values only")

    def lower(self, op, lw):
        for sym, value in zip(op.attrs["syms"], op.operands):
            lw.index.env[sym] = lw.reg(value)
        lw.define(op, lw.index.emit(op.attrs["expr"], op.results[0].type.ptx))

    def interpret(self, op, compiler):
        r = op.results[0].id
        bits = 8 * op.results[0].type.nbytes
        evaluate = compile_index(op.attrs["expr"], op.attrs["syms"], bits)
        args = _ids(op.operands)

        def run(thread):
            env = thread.env
            env[r] = evaluate(*[env[a] for a in args])
        return Step(run, op)

    def check_value(self, op, args):
        if any(a is UNKNOWN for a in args):
            return UNKNOWN
        try:
            return compile_expr(op.attrs["expr"], op.attrs["syms"])(*args)
        except (Unevaluable, ZeroDivisionError, OverflowError):
            return UNKNOWN


class Binary(NoEffects, OpDef):
    """a <kind> b, kind in BINARY (same types in and out)."""

    name = "binary"

    def verify(self, op):
        same_type(op, (*op.operands, *op.results))
        if len(op.operands) != 2 or op.attrs.get("kind") not in BINARY:
            fail(op, f"takes two operands, kind one of {BINARY}")

    def lower(self, op, lw):
        a, b = (lw.operand(v) for v in op.operands)
        t, kind = op.results[0].type, op.attrs["kind"]
        if not isinstance(a, Reg):
            a = lw.reg(op.operands[0])
        if kind in ("add", "sub"):
            d = getattr(arith, kind)(lw.k, a, b, dtype=t.ptx)
        elif kind == "mul":
            d = arith.mul(lw.k, a, b, dtype=t.ptx)
        elif kind == "div":
            d = arith.div(lw.k, a, b, dtype=t.ptx, rounding="rn" if t.is_float else None)
        else:
            d = getattr(arith, kind + "_")(lw.k, a, b, dtype=t.ptx)
        lw.define(op, d)

    def interpret(self, op, compiler):
        a, b = _ids(op.operands)
        r, dtype, kind = op.results[0].id, op.results[0].type, op.attrs["kind"]
        if kind == "div" and not dtype.is_float:
            def run(thread):
                env = thread.env
                if env[b] == 0:
                    raise ExecutionError(f"integer division {env[a]} / 0 ({dtype}): PTX leaves the "
                                         "result unspecified; guard the divisor", op.location)
                env[r] = numerics.int_div(env[a], env[b], dtype)
            return Step(run, op)
        compute = numerics.binary

        def run(thread):
            env = thread.env
            env[r] = compute(kind, env[a], env[b], dtype)
        return Step(run, op)

    def check_value(self, op, args):
        if any(a is UNKNOWN for a in args) or op.attrs["kind"] not in CHECK_BINARY or \
                not op.results[0].type.is_int:
            return UNKNOWN
        return CHECK_BINARY[op.attrs["kind"]](*args)


class Fma(NoEffects, OpDef):
    """a * b + c (fma.rn for floats, mad.lo for integers)."""

    name = "fma"

    def verify(self, op):
        same_type(op, (*op.operands, *op.results))
        if len(op.operands) != 3:
            fail(op, "takes three operands")

    def lower(self, op, lw):
        a, b, c = (lw.operand(v) for v in op.operands)
        lw.define(op, arith.fma(lw.k, lw.reg(op.operands[0]), b, c,
                                  dtype=op.results[0].type.ptx))

    def interpret(self, op, compiler):
        a, b, c = _ids(op.operands)
        r, dtype = op.results[0].id, op.results[0].type
        if not dtype.is_float:
            def run(thread):
                env = thread.env
                env[r] = numerics.wrap(env[a] * env[b] + env[c], dtype)      # mad.lo
            return Step(run, op)
        fma = numerics.fma

        def run(thread):
            env = thread.env
            env[r] = fma(env[a], env[b], env[c], dtype)
        return Step(run, op)


class Unary(NoEffects, OpDef):
    """<kind>(a), kind in UNARY (`ftz` for exp2)."""

    name = "unary"

    def verify(self, op):
        same_type(op, (*op.operands, *op.results))
        if len(op.operands) != 1 or op.attrs.get("kind") not in UNARY:
            fail(op, f"takes one operand, kind one of {UNARY}")

    def lower(self, op, lw):
        a, t, kind = lw.reg(op.operands[0]), op.results[0].type, op.attrs["kind"]
        k = lw.k
        if kind in ("neg", "abs"):
            d = getattr(arith, kind if kind == "neg" else "abs_")(k, a, dtype=t.ptx)
        elif kind == "exp2":
            d = sfu.ex2(k, a, dtype=t.ptx, ftz=t.name == "bf16" or op.attrs.get("ftz", False))
        elif kind == "log2":
            d = sfu.lg2(k, a, dtype=t.ptx)
        elif kind == "sqrt":
            d = sfu.sqrt(k, a, rounding="rn", dtype=t.ptx)
        elif kind == "rcp":
            d = sfu.rcp(k, a, rounding="rn", dtype=t.ptx)
        elif kind == "tanh":
            d = sfu.tanh(k, a, dtype=t.ptx)
        else:
            d = sfu.rsqrt(k, a, dtype=t.ptx)
        lw.define(op, d)

    def interpret(self, op, compiler):
        (a,) = _ids(op.operands)
        r, dtype, kind = op.results[0].id, op.results[0].type, op.attrs["kind"]
        compute, ftz = numerics.unary, op.attrs.get("ftz", False)

        def run(thread):
            env = thread.env
            env[r] = compute(kind, env[a], dtype, ftz)
        return Step(run, op)


class Cast(NoEffects, OpDef):
    """a converted to the result's type (round to nearest for floats, toward zero to integers;
    to fp8 with saturation to the largest finite value). A conversion to or from fp8 may take
    two values, converted as one PTX pair (fp8_convert.py)."""

    name = "cast"

    def verify(self, op):
        n = len(op.operands)
        fp8 = n and (op.operands[0].type.storage_only or op.results[0].type.storage_only)
        if n not in ((1, 2) if fp8 else (1,)) or len(op.results) != n:
            fail(op, "has one operand and one result (two of each for a conversion to or from "
                     "fp8)")
        if n == 2:
            same_type(op, op.operands)
            same_type(op, op.results)

    def lower(self, op, lw):
        src, dst = op.operands[0].type, op.results[0].type
        if src.storage_only or dst.storage_only:
            regs = [lw.reg(v) for v in op.operands]
            got = fp8_convert.to_fp8(lw.k, regs, dst) if dst.storage_only else \
                fp8_convert.from_fp8(lw.k, regs, src, dst)
            for r, reg in zip(op.results, got):
                lw.vals[r.id] = reg
            return
        a = lw.reg(op.operands[0])
        if src.is_float and dst.is_float:
            rounding = "rn" if dst.nbytes < src.nbytes else None
        elif dst.is_float:
            rounding = "rn"
        elif src.is_float:
            rounding = "rzi"
        else:
            rounding = None
        lw.define(op, convert.cvt(lw.k, a, dst.ptx, rounding=rounding))

    def interpret(self, op, compiler):
        src, dst = op.operands[0].type, op.results[0].type
        cast = numerics.cast
        if len(op.operands) == 2:
            pairs = tuple(zip(_ids(op.operands), _ids(op.results)))

            def run_pair(thread):
                env = thread.env
                for a, r in pairs:
                    env[r] = cast(env[a], src, dst)
            return Step(run_pair, op)
        (a,), r = _ids(op.operands), op.results[0].id

        def run(thread):
            env = thread.env
            env[r] = cast(env[a], src, dst)
        return Step(run, op)

    def check_value(self, op, args):
        if args[0] is UNKNOWN or not (op.results[0].type.is_int and op.operands[0].type.is_int):
            return UNKNOWN
        return args[0]


class Cmp(NoEffects, OpDef):
    """a <kind> b as a bool, kind in CMP."""

    name = "cmp"

    def verify(self, op):
        same_type(op, op.operands)
        if len(op.operands) != 2 or op.results[0].type != bool_ or op.attrs.get("kind") not in CMP:
            fail(op, f"compares two operands into a bool, kind in {CMP}")

    def lower(self, op, lw):
        a, b = (lw.operand(v) for v in op.operands)
        t = op.operands[0].type.ptx
        if not isinstance(a, Reg):
            if not isinstance(b, Reg):
                lw.define(op, static_cmp(op.attrs["kind"], a, b))
                return
            a = lw.reg(op.operands[0])
        lw.define(op, compare.setp(lw.k, op.attrs["kind"], a, b, dtype=t))

    def interpret(self, op, compiler):
        a, b = _ids(op.operands)
        r, dtype, kind = op.results[0].id, op.operands[0].type, op.attrs["kind"]
        compare = numerics.compare

        def run(thread):
            env = thread.env
            env[r] = compare(kind, env[a], env[b], dtype)
        return Step(run, op)

    def check_value(self, op, args):
        if any(a is UNKNOWN for a in args):
            return UNKNOWN
        return CHECK_CMP[op.attrs["kind"]](*args)


class Logic(NoEffects, OpDef):
    """a and/or b on bools."""

    name = "logic"

    def verify(self, op):
        if len(op.operands) != 2 or any(v.type != bool_ for v in (*op.operands, *op.results)) \
                or op.attrs.get("kind") not in ("and", "or"):
            fail(op, "combines two bools into a bool, kind and or or")

    def lower(self, op, lw):
        a, b = (lw.operand(v) for v in op.operands)
        if isinstance(a, bool) or isinstance(b, bool):
            static, other = (a, b) if isinstance(a, bool) else (b, a)
            if op.attrs["kind"] == "and":
                lw.define(op, other if static else False)
            else:
                lw.define(op, True if static else other)
            return
        lw.define(op, getattr(bits, op.attrs["kind"] + "_")(lw.k, a, b))

    def interpret(self, op, compiler):
        a, b = _ids(op.operands)
        r, both = op.results[0].id, op.attrs["kind"] == "and"

        def run(thread):
            env = thread.env
            env[r] = (env[a] and env[b]) if both else (env[a] or env[b])
        return Step(run, op)

    def check_value(self, op, args):
        if any(a is UNKNOWN for a in args):
            return UNKNOWN
        return np.logical_and(*args) if op.attrs["kind"] == "and" else np.logical_or(*args)


class Select(NoEffects, OpDef):
    """c ? a : b."""

    name = "select"

    def verify(self, op):
        same_type(op, (*op.operands[1:], *op.results))
        if len(op.operands) != 3 or op.operands[0].type != bool_:
            fail(op, "selects between two values on a bool")

    def lower(self, op, lw):
        c, a, b = (lw.operand(v) for v in op.operands)
        t = op.results[0].type
        if isinstance(c, bool):
            lw.define(op, a if c else b)
            return
        ptype = {"bf16": "b16", "f16": "b16"}.get(t.name, t.ptx)
        d = compare.selp(lw.k, lw.reg(op.operands[1]), b, c, dtype=ptype,
                         out=lw.k.reg(t.ptx))
        lw.define(op, d)

    def interpret(self, op, compiler):
        c, a, b = _ids(op.operands)
        r = op.results[0].id

        def run(thread):
            env = thread.env
            env[r] = env[a] if env[c] else env[b]
        return Step(run, op)

    def check_value(self, op, args):
        if any(a is UNKNOWN for a in args):
            return UNKNOWN
        return np.where(*args)



class IndexValue(NoEffects, OpDef):
    """A runtime integer (a loaded value, a reduction's result) made a kernel integer: the
    result is the operand itself, bound to the symbol `name`, which index expressions and
    lk.range bounds may use (lang/index_value.py). `lo`, `hi`: the range the author states
    (None: unknown), for the static bounds and the protocol check's choice of values. The
    value is the same in every thread of the CTA that runs the op (the author's claim; the
    interpreter checks it)."""

    name = "index_value"

    def verify(self, op):
        if len(op.operands) != 1 or len(op.results) != 1 or \
                op.operands[0].type not in (i32, i64) or op.results[0].type != op.operands[0].type:
            fail(op, "takes one i32/i64 value and gives it back, same type")
        lo, hi = op.attrs.get("lo"), op.attrs.get("hi")
        if not isinstance(op.attrs.get("name"), str) or \
                any(b is not None and type(b) is not int for b in (lo, hi)) or \
                lo is not None and hi is not None and lo > hi:
            fail(op, "names its symbol and states lo <= hi (ints or None)")

    def lower(self, op, lw):
        lw.define(op, lw.operand(op.operands[0]))          # the register itself

    def interpret(self, op, compiler):
        (a,), r = _ids(op.operands), op.results[0].id
        name, lo, hi = op.attrs["name"], op.attrs["lo"], op.attrs["hi"]

        def run(thread):
            value = thread.env[a]
            if lo is not None and value < lo or hi is not None and value > hi:
                raise ExecutionError(f"lk.index_value {name} = {value} in {thread.describe()}, "
                                     f"outside the stated range {lo}..{hi}", op.location)
            runs = thread.state.setdefault("index_value", {})
            n = runs[id(op)] = runs.get(id(op), -1) + 1
            seen = thread.cta.state.setdefault("index_value", {})
            first = seen.setdefault((id(op), n), (value, thread))
            if first[0] != value:
                raise DivergenceError(
                    f"lk.index_value {name} is {first[0]} in {first[1].describe()} but {value} "
                    f"in {thread.describe()}: a kernel integer is the same in every thread of "
                    "the CTA (load it with a broadcast layout, or keep it a register value)",
                    op.location)
            thread.env[r] = value
        return Step(run, op)

    def check_value(self, op, args):
        return args[0]        # the protocol check chooses its value (check/extract.py)
