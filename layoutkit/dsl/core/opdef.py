"""One definition per IR op: an `OpDef` subclass holds everything layoutkit knows about one op.

An op kind is one class, in the module of its family (``lang/scalar_ops.py``,
``sm90/mbarrier_ops.py``, ...), with a name, the targets it exists on, and four facets:

    verify(op)                      raise ``fail(op, rule)`` when the op is malformed
    lower(op, lw)                   emit its PTX through ``lw``, the Lowering (dsl/lower)
    interpret(op, compiler) -> Step compile it for the CPU interpreter (dsl/interpreter)
    effects(op, ex, mask, loops)    what the static protocol check sees (dsl/check): the events
                                    it emits on the Extractor ``ex`` for the threads of ``mask``
                                    (barrier operations, asynchronous copies, shared-memory
                                    accesses), or the walk into its regions; an op with none
                                    says so by inheriting `NoEffects`

and one optional facet with a safe default: ``check_value(op, args)``, the op's result for the
protocol check's evaluator given its operands' values (default: unknown, so a condition that
depends on it is undecidable and reported as such).

A concrete class (one that sets ``name`` in its body) missing a facet is refused when it is
defined, and a name defined twice is refused: `OpDefinitionError`. Every `Op` of the IR holds
its definition (``op.defn``), so every pass dispatches through it and none can forget an op.

>>> class Nop(OpDef):
...     name = "doc_nop"
...     def verify(self, op): pass
...     def lower(self, op, lw): pass
...     def interpret(self, op, compiler): pass
Traceback (most recent call last):
...
layoutkit.dsl.core.opdef.OpDefinitionError: IR op 'doc_nop' (class Nop) lacks the facet effects(op, ex, mask, loops); every op defines verify, lower, interpret and effects (inherit NoEffects for an op the protocol check has nothing to see in)
"""
from __future__ import annotations

from typing import ClassVar

SM80, SM90A = "sm_80", "sm_90a"
TARGETS = (SM90A, SM80)          # the targets the DSL lowers to; the first is the default
ALL_TARGETS = frozenset(TARGETS)
SM90A_ONLY = frozenset({SM90A})   # the Hopper-only ops (lk.sm90's wgmma, TMA, clusters, ...)
UNKNOWN = None                   # check_value's "not known at trace time"

FACETS = {"verify": "verify(op)", "lower": "lower(op, lw)",
          "interpret": "interpret(op, compiler)", "effects": "effects(op, ex, mask, loops)"}


class OpDefinitionError(TypeError):
    """An op definition that is incomplete or clashes with another (a layoutkit bug)."""


REGISTRY: dict[str, "OpDef"] = {}


class OpDef:
    """The definition of one IR op kind; see the module docstring."""

    name: ClassVar[str | None] = None
    targets: ClassVar[frozenset[str]] = ALL_TARGETS
    # For the protocol check's walk: whether effects() emits events of its own (False for ops
    # whose only effect is walking their regions), and whether the op synchronizes (a barrier,
    # an asynchronous copy or MMA, a fence): a kernel without such an op is not walked.
    emits_events: ClassVar[bool] = True
    synchronizes: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            return                         # a shared base of a family, not an op
        for facet, signature in FACETS.items():
            if getattr(cls, facet) is getattr(OpDef, facet):
                hint = (" (inherit NoEffects for an op the protocol check has nothing to see in)"
                        if facet == "effects" else "")
                raise OpDefinitionError(f"IR op {cls.name!r} (class {cls.__name__}) lacks the "
                                        f"facet {signature}; every op defines verify, lower, "
                                        f"interpret and effects{hint}")
        unknown = set(cls.targets) - ALL_TARGETS
        if not cls.targets or unknown:
            raise OpDefinitionError(f"IR op {cls.name!r}: targets {sorted(cls.targets)} must be "
                                    f"a non-empty subset of {list(TARGETS)}")
        if cls.name in REGISTRY:
            raise OpDefinitionError(f"IR op {cls.name!r} is defined twice: by "
                                    f"{type(REGISTRY[cls.name]).__qualname__} and "
                                    f"{cls.__qualname__}")
        REGISTRY[cls.name] = cls()

    # ---- the facets (each concrete op overrides all four) ----------------------------------
    def verify(self, op) -> None:
        raise NotImplementedError

    def lower(self, op, lw) -> None:
        raise NotImplementedError

    def interpret(self, op, compiler):
        raise NotImplementedError

    def effects(self, op, ex, mask, loops) -> None:
        raise NotImplementedError

    def check_value(self, op, args):
        """The op's result for the protocol check's evaluator (ints/bools or numpy arrays over
        the threads), given its operands' values; UNKNOWN unless the op says otherwise."""
        return UNKNOWN

    def __repr__(self) -> str:
        return f"<op {self.name}>"


class NoEffects:
    """Mixin of an op the protocol check has nothing to see in: it touches no shared memory,
    no barrier and no asynchronous unit, and owns no region."""

    emits_events = False

    def effects(self, op, ex, mask, loops) -> None:
        return None


FACET_CALLS: dict[tuple[str, str], int] = {}


def count_facet_calls() -> None:
    """From now on, count each facet call of every registered op in FACET_CALLS[(name, facet)]
    (the test suite's coverage check; a few hundred nanoseconds a call)."""
    for defn in REGISTRY.values():
        cls = type(defn)
        if getattr(cls, "_counted", False):
            continue
        for facet in FACETS:
            setattr(cls, facet, _counting(cls.name, facet, getattr(cls, facet)))
        cls._counted = True


def _counting(name: str, facet: str, method):
    key = (name, facet)

    def counted(self, *args):
        FACET_CALLS[key] = FACET_CALLS.get(key, 0) + 1
        return method(self, *args)
    counted.__wrapped__ = method
    return counted


def definition(name_or_def) -> OpDef:
    """The registered definition of an op given by IR name, OpDef class or instance."""
    if isinstance(name_or_def, OpDef):
        return name_or_def
    name = name_or_def.name if isinstance(name_or_def, type) else name_or_def
    found = REGISTRY.get(name)
    if found is None:
        raise OpDefinitionError(f"no IR op is named {name!r}; the ops: "
                                f"{', '.join(sorted(REGISTRY))}")
    return found


__all__ = ["OpDef", "NoEffects", "OpDefinitionError", "REGISTRY", "definition", "FACETS",
           "FACET_CALLS", "count_facet_calls",
           "TARGETS", "ALL_TARGETS", "SM90A_ONLY", "SM80", "SM90A", "UNKNOWN"]
