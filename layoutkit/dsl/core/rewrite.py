"""The kernel function as traced: its own source, recompiled with Python's truth tests and
`==`/`!=` routed through layoutkit.dsl.core.constructs, so that one applied to a runtime value
is a TraceError naming the construct instead of a value sympy decides silently (`n == m` is
False while tracing, `if n:` is True, `(a < b) & (c < d)` is always true).

    if t < n:          ->  if __lk_truth__(t < n, "if"):
    while a and b:     ->  while __lk_truth__(__lk_truth__(a, "and") and b, "while"):
    not x              ->  not __lk_truth__(x, "not")
    a == b             ->  __lk_compare__(a, b, False, "a", "b")   (a single == or !=)

The same goes for `x if c else y`, `assert` and a comprehension's `if`. `__lk_truth__` returns
its argument (Python then tests it as before), so plain values behave exactly as in the
original. Line and column numbers are the original's, so every location, traceback and
`.loc` line stays the user's. The rewrite is used only when the source that `inspect` finds
compiles to the function's own bytecode (a file edited since import, or code without a source,
keeps the original function: then the checks of constructs.explain still apply).
"""
from __future__ import annotations

import __future__
import ast
import inspect
import types

from . import constructs

TRUTH, COMPARE = "__lk_truth__", "__lk_compare__"
_FUTURE = [getattr(__future__, name).compiler_flag for name in __future__.all_feature_names]


class _Checks(ast.NodeTransformer):
    def _truth(self, node, construct: str):
        call = ast.Call(ast.Name(TRUTH, ast.Load()), [node, ast.Constant(construct)], [])
        return ast.copy_location(call, node)

    def _tested(self, node, construct: str):
        self.generic_visit(node)
        node.test = self._truth(node.test, construct)
        return node

    def visit_If(self, node):
        return self._tested(node, "if")

    def visit_While(self, node):
        return self._tested(node, "while")

    def visit_IfExp(self, node):
        return self._tested(node, "ifexp")

    def visit_Assert(self, node):
        return self._tested(node, "assert")

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        construct = "and" if isinstance(node.op, ast.And) else "or"
        node.values = [self._truth(v, construct) for v in node.values[:-1]] + node.values[-1:]
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            node.operand = self._truth(node.operand, "not")
        return node

    def visit_comprehension(self, node):
        self.generic_visit(node)
        node.ifs = [self._truth(c, "comprehension") for c in node.ifs]
        return node

    def visit_Compare(self, node):
        texts = [ast.Constant(ast.unparse(x)) for x in (node.left, node.comparators[0])]
        self.generic_visit(node)
        if len(node.ops) != 1 or not isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            return node
        negate = ast.Constant(isinstance(node.ops[0], ast.NotEq))
        call = ast.Call(ast.Name(COMPARE, ast.Load()),
                        [node.left, node.comparators[0], negate] + texts, [])
        return ast.copy_location(call, node)


def _definition(fn):
    """The function's FunctionDef (decorators, annotations and defaults dropped: they belong to
    the enclosing scope), parsed with the original line and column numbers."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    indented = lines[0][:1] in (" ", "\t")
    text = ("if 1:\n" if indented else "") + "".join(lines)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    ast.increment_lineno(tree, first - 1 - (1 if indented else 0))
    body = tree.body[0].body if indented else tree.body
    node = body[0] if body else None
    if not isinstance(node, ast.FunctionDef) or node.name != fn.__name__:
        return None
    if node.decorator_list:           # the code's first line is its first decorator's
        node.lineno = min(d.lineno for d in node.decorator_list)
    node.decorator_list = []
    node.returns = None
    args = node.args
    for arg in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]:
        if arg is not None:
            arg.annotation = None
    args.defaults, args.kw_defaults = [], [None] * len(args.kw_defaults)
    return node


def _compile(fn, node, names):
    """The code object of `node` compiled inside a function whose parameters are `names` (the
    free variables it may use), or None."""
    outer = ast.FunctionDef(
        name="__lk_outer__",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names], vararg=None,
                           kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[node, ast.Return(ast.Name(node.name, ast.Load()))], decorator_list=[],
        returns=None, type_comment=None, **({"type_params": []} if hasattr(ast, "TypeAlias")
                                            else {}))
    ast.copy_location(outer, node)
    module = ast.fix_missing_locations(ast.Module([outer], type_ignores=[]))
    flags = sum(f for f in _FUTURE if fn.__code__.co_flags & f)
    try:
        code = compile(module, fn.__code__.co_filename, "exec", flags=flags, dont_inherit=True)
    except (SyntaxError, ValueError, TypeError):
        return None
    outer_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    return next((c for c in outer_code.co_consts if isinstance(c, types.CodeType)
                 and c.co_name == fn.__name__), None)


_NESTED = 0x10          # CO_NESTED: the recompiled function is nested in its wrapper


def _same(a, b) -> bool:
    """Whether code objects `a` and `b` were compiled from the same source: the same names,
    constants, flags and lines. (Not the same bytecode: the compiler picks LOAD_ATTR for a call
    on a name the module imports and LOAD_METHOD otherwise, and the wrapper imports nothing.)"""
    fields = ("co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_varnames",
              "co_names", "co_freevars", "co_cellvars", "co_name")
    if any(getattr(a, f) != getattr(b, f) for f in fields) or \
            (a.co_flags | _NESTED) != (b.co_flags | _NESTED) or len(a.co_consts) != len(b.co_consts):
        return False
    if {line for *_, line in a.co_lines()} != {line for *_, line in b.co_lines()}:
        return False
    for x, y in zip(a.co_consts, b.co_consts):
        if isinstance(x, types.CodeType) != isinstance(y, types.CodeType):
            return False
        if isinstance(x, types.CodeType):
            if not _same(x, y):
                return False
        elif type(x) is not type(y) or x != y and not _same_qualname(x, y):
            return False
    return True


def _same_qualname(x, y) -> bool:
    """Python 3.10 keeps a nested function's qualified name among the constants: the wrapper's
    `__lk_outer__.<locals>.` stands where the original's enclosing names were."""
    prefix = "__lk_outer__.<locals>."
    return isinstance(x, str) and x.startswith(prefix) and y.endswith("." + x[len(prefix):])


def checked(fn):
    """`fn` recompiled with the construct checks (see the module docstring), or `fn` itself
    when its source is not available or no longer matches its bytecode."""
    if not isinstance(fn, types.FunctionType):
        return fn
    node = _definition(fn)
    if node is None:
        return fn
    free = fn.__code__.co_freevars
    plain = _compile(fn, node, free)
    if plain is None or not _same(plain, fn.__code__):
        return fn                                # the source is not this function's
    node = ast.fix_missing_locations(_Checks().visit(node))
    code = _compile(fn, node, free + (TRUTH, COMPARE))
    if code is None:
        return fn
    cells = dict(zip(free, fn.__closure__ or ()))
    cells[TRUTH] = types.CellType(constructs.truth)
    cells[COMPARE] = types.CellType(constructs.compare)
    if any(name not in cells for name in code.co_freevars):
        return fn
    new = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__,
                             tuple(cells[name] for name in code.co_freevars))
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__module__ = fn.__module__
    return new


__all__ = ["checked"]
