"""Python constructs on runtime values: the `TraceError` that names the construct, the value,
the rule and the layoutkit form to use instead.

A kernel integer (an integer parameter, `lk.thread_id()`, `lk.block_id()`, a loop index) is a
sympy expression, and a float or bool value is a `Scalar`: their values exist only when the
kernel runs. Python's `if`, `while`, `and`/`or`/`not`, `x if c else y`, `assert`, a
comprehension's `if`, `range()` and `==`/`!=` need them while the kernel is traced, so each use
is refused, never decided silently:

- in the kernel's own function, `layoutkit.dsl.core.rewrite` routes every truth test through
  `truth` and every single `==`/`!=` through `compare` (the construct is known from the source);
- elsewhere (a helper the kernel calls), sympy's "cannot determine truth value", range()'s
  "cannot be interpreted as an integer" and `Scalar.__bool__`/`__eq__` are recognised and the
  construct is found from the user's bytecode position in the source (`explain`, `at_frame`).

A comparison that sympy decides from the declared facts (`n > 0` of a positive `n`, `n == n`,
`n == n + 1`) is a trace-time constant: it holds for every run, so it is no silent choice.
"""
from __future__ import annotations

import ast
import linecache
import numbers
import re

from layoutkit.algebra.sympy_gate import sympy
from layoutkit.ptx.builder import SourceLocation

from .errors import TraceError

# construct key -> (its name in a message, the layoutkit form to use instead)
CONSTRUCTS = {
    "if": ("an `if` statement",
           "branch at run time with `with lk.if_(cond):`, or pick a value with "
           "lk.where(cond, a, b); a Python `if` takes constexprs and plain ints"),
    "while": ("a `while` loop",
              "loop at run time with `for i in lk.range(start, stop):` (carry= for values that "
              "change per iteration); a Python `while` takes constexprs and plain ints"),
    "ifexp": ("a conditional expression (`a if cond else b`)",
              "pick a value at run time with lk.where(cond, a, b)"),
    "assert": ("an `assert`",
               "an assert runs while tracing, so it can check only constexprs and plain ints"),
    "and": ("`and`", "combine run-time conditions with & instead, as in "
                     "`lk.if_((a < b) & (c < d))`; Python's `and` needs a trace-time truth value"),
    "or": ("`or`", "combine run-time conditions with | instead, as in "
                   "`lk.if_((a < b) | (c < d))`; Python's `or` needs a trace-time truth value"),
    "not": ("`not`", "flip the comparison instead (`not a < b` is `a >= b`), or swap the arms "
                     "of lk.where"),
    "chain": ("a chained comparison (`a < b < c`)",
              "write it as two comparisons joined with &: `(a < b) & (b < c)`"),
    "comprehension": ("a comprehension's `if`",
                      "filter only on values known while tracing; pick run-time values with "
                      "lk.where(cond, a, b)"),
    "truth": ("a Python truth test (`if`, `while`, `and`/`or`/`not`)",
              "branch at run time with `with lk.if_(cond):`, loop with lk.range, or pick a "
              "value with lk.where(cond, a, b)"),
    "bool": ("`bool()`", "branch at run time with `with lk.if_(cond):`, or pick a value with "
                         "lk.where(cond, a, b)"),
    "minmax": ("`max()`/`min()`/`sorted()`",
               "pick at run time with lk.where(a > b, a, b), or lk.maximum(a, b) / "
               "lk.minimum(a, b) for scalars and tensors; Python's max and min compare while "
               "tracing"),
    "range": ("`range()` of a runtime value",
              "loop at run time with `for i in lk.range(start, stop):`; Python's range unrolls "
              "while tracing and takes constexprs and plain ints"),
    "int": ("a runtime value used as a Python int",
            "Python ints (list indices, sizes, int()) must be known while tracing: use a "
            "constexpr, or keep the value in kernel arithmetic"),
}


def _runtime_symbols() -> set:
    from .tracer import _ACTIVE
    trace = _ACTIVE.get()
    return set(trace.symbols) if trace is not None else set()


def is_runtime(x) -> bool:
    """Whether `x` is known only when the kernel runs: a Scalar or register tensor, or a sympy
    expression over the trace's runtime symbols that sympy has not decided."""
    from .values import _Arith
    if isinstance(x, _Arith):
        return True
    if isinstance(x, sympy.Basic) and not isinstance(x, sympy.logic.boolalg.BooleanAtom):
        return bool(x.free_symbols & _runtime_symbols())
    return False


def describe(value) -> str:
    """`value` in a message: what it is, and its printed form."""
    from .values import RegisterTensor, Scalar
    if isinstance(value, Scalar):
        return ("a bool scalar (a run-time comparison)" if value.dtype.name == "bool"
                else f"{_a(value.dtype)} scalar")
    if isinstance(value, RegisterTensor):
        return f"{_a(value.dtype)} register tensor over {value.layout}"
    if isinstance(value, sympy.core.relational.Relational):
        return f"the comparison {value} of kernel integers"
    if isinstance(value, sympy.Expr):
        return f"the kernel integer {value}"
    if isinstance(value, sympy.Basic):
        return f"the condition {value} of kernel integers"
    return str(value)


def _a(dtype) -> str:
    """`dtype` with its article: an f32, an i32, a bf16, a u32."""
    return ("an " if str(dtype)[:1] in "aefhilmnorsx" else "a ") + str(dtype)


def _kind(value, text: str) -> str:
    """`text is ...`: the kind of the runtime value `value` written `text` in the source."""
    from .values import RegisterTensor, Scalar
    if isinstance(value, Scalar):
        return f"{text} is {_a(value.dtype)} scalar"
    if isinstance(value, RegisterTensor):
        return f"{text} is {_a(value.dtype)} register tensor"
    shown = "" if text.strip("`") == str(value) else f" ({value})"
    return f"{text} is a kernel integer{shown}"


def construct_error(construct: str, what: str, location=None) -> TraceError:
    """The TraceError of `construct` (a key of CONSTRUCTS) applied to `what` (a description)."""
    name, fix = CONSTRUCTS[construct]
    if construct in ("range", "int"):
        message = f"{name}: {what}, known only when the kernel runs; {fix}"
    else:
        message = (f"{name} on a runtime value: {what} is known only when the kernel runs, so "
                   f"it has no Python truth value while tracing; {fix}")
    return TraceError(message, location) if location is not None else TraceError(message)


def equality_error(a, b, negate: bool, texts=None, location=None) -> TraceError:
    """The TraceError of Python's ==/!= between a and b, one of them a runtime value; `texts`
    is the source of the two operands when known."""
    op, form = ("!=", "lk.ne") if negate else ("==", "lk.eq")
    left, right = texts if texts is not None else ("a", "b")
    named = " and ".join(_kind(x, text) for x, text in ((a, left), (b, right))
                         if is_runtime(x))
    message = (f"`{op}` between runtime values: in `{left} {op} {right}`, {named}, known only "
               f"when the kernel runs; Python's {op} would decide it while tracing (comparing "
               f"the expressions, not their values) and silently keep one branch; write "
               f"{form}({left}, {right}) and branch on it with lk.if_ or pick with lk.where")
    return TraceError(message, location) if location is not None else TraceError(message)


def refused_equality(value, other, negate: bool, frame) -> TraceError:
    """The error of `value == other` (or `!=`), `value` a Scalar or register tensor, called
    from `frame` (a helper's code, which the rewrite does not see)."""
    span = _span(frame.f_code, frame.f_lasti, frame.f_lineno)
    tree = _parse(frame.f_code.co_filename)
    source = "".join(linecache.getlines(frame.f_code.co_filename))
    nodes = [node for node in (ast.walk(tree) if tree is not None else ())
             if isinstance(node, ast.Compare) and len(node.ops) == 1 and _holds(node, span)]
    if span[1] is None and len(nodes) > 1:     # Python 3.10: the line only, and not one ==
        nodes = []
    if not nodes:
        return equality_error(value, other, negate)
    node = nodes[-1]                           # the innermost (ast.walk goes outside in)
    texts = (ast.get_source_segment(source, node.left),
             ast.get_source_segment(source, node.comparators[0]))
    # `1.0 == x` calls x's reflected __eq__: then `value` is the right side
    swapped = _local(frame, node.left) is not value and (
        isinstance(node.left, ast.Constant) or _local(frame, node.comparators[0]) is value)
    return equality_error(*((other, value) if swapped else (value, other)), negate, texts)


def _local(frame, node):
    """The value of the name `node` in `frame`, or None when `node` is not a local name."""
    if isinstance(node, ast.Name):
        return frame.f_locals.get(node.id)
    return None


# ---- the checks the rewritten kernel function calls -----------------------------------------
def truth(value, construct: str):
    """`value` unchanged if Python may take its truth value while tracing, else the error."""
    if is_runtime(value):
        raise construct_error(construct, describe(value))
    return value


def compare(a, b, negate: bool, left: str = "a", right: str = "b"):
    """Python's `a == b` (`a != b` when `negate`), refused between runtime values unless sympy
    decides it from the declared facts (then it is that constant); `left` and `right` are the
    operands' source."""
    if (is_runtime(a) or is_runtime(b)) and comparable(a) and comparable(b):
        from .values import _Arith
        if not (isinstance(a, _Arith) or isinstance(b, _Arith)):
            decided = _decide_eq(a, b)
            if decided is not None:
                return decided != negate
        raise equality_error(a, b, negate, (left, right))
    return a != b if negate else a == b


def comparable(x) -> bool:
    """Whether `x` may equal a runtime value: a number, a sympy expression, a Scalar or a
    register tensor (None, a string or a layout never does: == on them stays Python's)."""
    from .values import _Arith
    return isinstance(x, (numbers.Number, sympy.Basic, _Arith))


def _decide_eq(a, b):
    try:
        rel = sympy.Eq(sympy.sympify(a, strict=True), sympy.sympify(b, strict=True))
    except (sympy.SympifyError, TypeError, ValueError):
        return False           # not a number: never equal to a kernel integer
    return bool(rel) if isinstance(rel, sympy.logic.boolalg.BooleanAtom) else None


# ---- recognising the error where it happened (helpers the rewrite does not see) -------------
_TRUTH = re.compile(r"cannot determine truth value of Relational(?::\s*(.*))?")
_INT = re.compile(r"'(\w+)' object cannot be interpreted as an integer|indices must be integers"
                  r"(?: or slices)?(?:, not (\w+))?|Cannot convert symbols to int")
_SKIP = ("layoutkit", "sympy", "contextlib", "functools", "mpmath")


def _internal(frame) -> bool:
    name = frame.f_globals.get("__name__", "") or ""
    return name.split(".")[0] in _SKIP


def explain(exc: BaseException) -> TraceError | None:
    """The construct error for a TypeError raised by a Python construct on a runtime value
    (sympy's truth value of a relation, range()/int()/an index of a kernel integer or scalar),
    located at the user's frame; None for any other error."""
    if not isinstance(exc, TypeError):
        return None
    text = str(exc)
    tb, user = exc.__traceback__, None
    while tb is not None:
        if not _internal(tb.tb_frame):
            user = tb
        tb = tb.tb_next
    if user is None:
        return None
    frame, lasti = user.tb_frame, user.tb_lasti
    location = SourceLocation(frame.f_code.co_filename, user.tb_lineno)
    match = _TRUTH.fullmatch(text)
    if match is not None:
        construct, _ = at_code(frame.f_code, lasti, user.tb_lineno, truth_test=True)
        what = f"the comparison {match.group(1)} of kernel integers" if match.group(1) \
            else "a comparison of kernel integers"
        return construct_error(construct, what, location)
    match = _INT.search(text)
    if match is not None:
        kind = match.group(1) or match.group(2)
        if kind is not None and not (hasattr(sympy, kind) or kind in ("Extent", "Scalar",
                                                                     "RegisterTensor")):
            return None
        construct, node = at_code(frame.f_code, lasti, user.tb_lineno, truth_test=False)
        source, operand = _segment(frame.f_code.co_filename, node)
        value = _local(frame, operand)
        known = is_runtime(value) or isinstance(value, sympy.Expr) and value.free_symbols
        what = (_kind(value, f"`{source}`") if known else
                f"`{source}` is a runtime value") if source else "a runtime value"
        return construct_error(construct, what, location)
    return None


def at_frame(frame, truth_test: bool = True) -> str:
    """The construct key of the instruction `frame` is executing (for Scalar.__bool__)."""
    return at_code(frame.f_code, frame.f_lasti, frame.f_lineno, truth_test)[0]


def at_code(code, lasti: int, line: int, truth_test: bool):
    """(construct key, AST node or None) of the instruction at `lasti` of `code`: the innermost
    construct of the source whose span holds the instruction's span (its test, for `if`,
    `while` and `assert`); "truth"/"int" when none is found."""
    default = ("truth" if truth_test else "int"), None
    span = _span(code, lasti, line)
    tree = _parse(code.co_filename)
    if tree is None or span is None:
        return default
    best = None
    for node in ast.walk(tree):
        key = _key(node, truth_test)
        if key is None or not hasattr(node, "lineno"):
            continue
        target = getattr(node, "test", None) if isinstance(node, (ast.If, ast.While,
                                                                  ast.Assert)) else None
        if not (_holds(node, span) and (target is None or _holds(target, span) or
                                        _same(node, span))):
            continue
        size = (node.end_lineno - node.lineno, node.end_col_offset - node.col_offset) \
            if node.end_lineno == node.lineno else (node.end_lineno - node.lineno, 0)
        if best is None or size < best[0]:
            best = (size, key, node)
    return (best[1], best[2]) if best is not None else default


def _key(node, truth_test: bool):
    if truth_test:
        if isinstance(node, ast.If):
            return "if"
        if isinstance(node, ast.While):
            return "while"
        if isinstance(node, ast.IfExp):
            return "ifexp"
        if isinstance(node, ast.Assert):
            return "assert"
        if isinstance(node, ast.BoolOp):
            return "and" if isinstance(node.op, ast.And) else "or"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return "not"
        if isinstance(node, ast.Compare) and len(node.ops) > 1:
            return "chain"
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return "comprehension"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return {"bool": "bool", "max": "minmax", "min": "minmax",
                    "sorted": "minmax"}.get(node.func.id)
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return "range" if node.func.id == "range" else "int" if node.func.id == "int" else None
    return "int" if isinstance(node, ast.Subscript) else None


def _span(code, lasti: int, line: int):
    positions = getattr(code, "co_positions", None)
    if positions is None or lasti < 0:                   # Python 3.10: the line only
        return (line, None, line, None)
    for index, pos in enumerate(positions()):
        if index == lasti // 2:
            if pos[0] is None:
                return (line, None, line, None)
            return (pos[0], pos[2], pos[1], pos[3])
    return (line, None, line, None)


def _holds(node, span) -> bool:
    start = (node.lineno, node.col_offset)
    end = (node.end_lineno, node.end_col_offset)
    if span[1] is None:
        return node.lineno <= span[0] <= node.end_lineno
    return start <= (span[0], span[1]) and (span[2], span[3]) <= end


def _same(node, span) -> bool:
    return (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset) == span


def _parse(filename: str):
    text = "".join(linecache.getlines(filename))
    if not text:
        return None
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _segment(filename: str, node):
    """(source text, AST node) of the operand that `node` (a call or a subscript) needs as an
    int: a call's arguments (the node of the only one), a subscript's index."""
    if node is None:
        return None, None
    source = "".join(linecache.getlines(filename))
    if isinstance(node, ast.Call):
        parts = [ast.get_source_segment(source, a) for a in node.args]
        only = node.args[0] if len(node.args) == 1 else None
        return ", ".join(p for p in parts if p) or None, only
    if isinstance(node, ast.Subscript):
        return ast.get_source_segment(source, node.slice), node.slice
    return ast.get_source_segment(source, node), node


__all__ = ["CONSTRUCTS", "is_runtime", "comparable", "describe", "construct_error", "equality_error",
           "refused_equality",
           "truth", "compare", "explain", "at_frame", "at_code"]
