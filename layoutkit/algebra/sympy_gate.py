"""The sympy-free side of the symbolic algebra: whether a value is a sympy object, answered
without importing sympy (~170 ms), modules imported at their first use, and the provers'
memo, so that integer-only algebra never loads sympy.

No sympy object can exist before something imports sympy, so while `sys.modules` has no sympy
every value is plain; once it is there the answer is sympy's own isinstance.
"""
from __future__ import annotations

import importlib
import sys
import types

__all__ = ["is_sympy", "is_symbolic", "is_sympy_integer", "deferred_module", "memoized",
           "sympy"]


def _sympy():
    """The sympy module once it is imported (by anyone), else None."""
    module = sys.modules.get("sympy")
    return module if module is not None and hasattr(module, "Integer") else None


def is_sympy(x) -> bool:
    """x is a sympy object (an expression, sympy.Integer included)."""
    sympy = _sympy()
    return sympy is not None and isinstance(x, sympy.Basic)


def is_symbolic(x) -> bool:
    """x is a sympy expression other than a plain sympy.Integer."""
    sympy = _sympy()
    return sympy is not None and isinstance(x, sympy.Basic) and not isinstance(x, sympy.Integer)


def is_sympy_integer(x) -> bool:
    """x is a sympy.Integer (a closed integer a sympy computation returned)."""
    sympy = _sympy()
    return sympy is not None and isinstance(x, sympy.Integer)


class deferred_module:
    """A module imported at its first attribute access (then looked up in sys.modules), for
    the modules reached only on symbolic paths: `sympy = deferred_module("sympy")`."""

    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<deferred module {self._name!r}>"


def memoized(prove):
    """``prove`` with its answers remembered per operands: sympy expressions are immutable and
    hash by structure (an extent's divisor included), so an answer holds for equal operands.
    A trace asks the same questions many times (one per value of a partition, per view)."""
    answers: dict = {}

    def ask(*operands):
        try:
            return answers[operands]
        except KeyError:
            pass
        except TypeError:                       # an unhashable operand: nothing to remember
            return prove(*operands)
        if len(answers) > 1 << 14:
            answers.clear()
        answers[operands] = answer = prove(*operands)
        return answer

    ask.__doc__, ask.__name__, ask.__wrapped__ = prove.__doc__, prove.__name__, prove
    return ask


class _SympyStandIn(types.ModuleType):
    """Stands for the sympy module in the modules that import it as
    `from layoutkit.algebra.sympy_gate import sympy` (the DSL's): its first attribute read
    imports sympy and binds the module in place of the stand-in wherever a module holds the
    stand-in as `sympy`, so that later reads are the module's own, at no cost. `import
    layoutkit.dsl` and decorating kernels then load no sympy (~170 ms); the first trace does."""

    def __getattr__(self, attr: str):
        module = importlib.import_module("sympy")
        for holder in list(sys.modules.values()):
            names = getattr(holder, "__dict__", None)
            if type(names) is dict and names.get("sympy") is self:
                names["sympy"] = module
        return getattr(module, attr)


sympy = _SympyStandIn("sympy")
