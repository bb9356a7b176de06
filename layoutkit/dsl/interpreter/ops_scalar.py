"""Handlers of the scalar ops: thread_idx, block_idx, const, index, binary, fma, unary, cast,
cmp, logic, select (numerics in `numerics`, index expressions in `index_eval`)."""
from __future__ import annotations

from . import numerics
from .errors import ExecutionError
from .executor import Step, handler
from .index_eval import compile_index


def _ids(values) -> tuple[int, ...]:
    return tuple(v.id for v in values)


@handler("thread_idx")
def _thread_idx(op, compiler):
    r, axis = op.results[0].id, op.attrs["axis"]

    def run(thread):
        thread.env[r] = thread.tid if axis == 0 else 0     # blocks are (32 * num_warps, 1, 1)
    return Step(run, op)


@handler("block_idx")
def _block_idx(op, compiler):
    r, axis = op.results[0].id, op.attrs["axis"]

    def run(thread):
        thread.env[r] = thread.cta.coord[axis]
    return Step(run, op)


@handler("const")
def _const(op, compiler):
    r = op.results[0].id
    value = numerics.to_dtype(op.attrs["value"], op.results[0].type)

    def run(thread):
        thread.env[r] = value
    return Step(run, op)


@handler("index")
def _index(op, compiler):
    r = op.results[0].id
    bits = 8 * op.results[0].type.nbytes
    evaluate = compile_index(op.attrs["expr"], op.attrs["syms"], bits)
    args = _ids(op.operands)

    def run(thread):
        env = thread.env
        env[r] = evaluate(*[env[a] for a in args])
    return Step(run, op)


@handler("binary")
def _binary(op, compiler):
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


@handler("fma")
def _fma(op, compiler):
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


@handler("unary")
def _unary(op, compiler):
    (a,) = _ids(op.operands)
    r, dtype, kind = op.results[0].id, op.results[0].type, op.attrs["kind"]
    compute, ftz = numerics.unary, op.attrs.get("ftz", False)

    def run(thread):
        env = thread.env
        env[r] = compute(kind, env[a], dtype, ftz)
    return Step(run, op)


@handler("cast")
def _cast(op, compiler):
    (a,) = _ids(op.operands)
    src, dst, r = op.operands[0].type, op.results[0].type, op.results[0].id
    cast = numerics.cast

    def run(thread):
        env = thread.env
        env[r] = cast(env[a], src, dst)
    return Step(run, op)


@handler("cmp")
def _cmp(op, compiler):
    a, b = _ids(op.operands)
    r, dtype, kind = op.results[0].id, op.operands[0].type, op.attrs["kind"]
    compare = numerics.compare

    def run(thread):
        env = thread.env
        env[r] = compare(kind, env[a], env[b], dtype)
    return Step(run, op)


@handler("logic")
def _logic(op, compiler):
    a, b = _ids(op.operands)
    r, both = op.results[0].id, op.attrs["kind"] == "and"

    def run(thread):
        env = thread.env
        env[r] = (env[a] and env[b]) if both else (env[a] or env[b])
    return Step(run, op)


@handler("select")
def _select(op, compiler):
    c, a, b = _ids(op.operands)
    r = op.results[0].id

    def run(thread):
        env = thread.env
        env[r] = env[a] if env[c] else env[b]
    return Step(run, op)
