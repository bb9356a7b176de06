"""Symbolic extents: positive-integer sympy expressions with declared divisibility, and a prover.

``symbol("M", 128)`` is a positive-integer sympy Symbol ``M`` that carries its divisor; to prove
a fact, each extent is rewritten as ``128*q`` for a hidden positive-integer ``q``, so ``M/128``
is known exact and ``ceil_div(M, 64)`` simplifies to ``M/64``. Conditions an operation needs (divides, <=, ==) are decided by
``divides``/``le``/``eq``, which answer True, False or None (unknown); ``require`` turns an
unknown into a LayoutError that says the condition could not be proven from the declared facts.

Decisions that only shape the result's form (is this extent 1? can these two modes merge?) treat
an unproven fact as false, as CuTe treats a dynamic int: substituting values into a symbolic result
gives exactly the integer result whenever no symbolic extent of it becomes 1 (and, for a merge,
two different expressions do not happen to coincide); otherwise it is the same function with an
extra size-1 mode. Decisions an operation's correctness depends on are proven or raise.

Every function here is reached only when a sympy object is present: plain ints never touch sympy.
"""
from __future__ import annotations

import math

import sympy

from .errors import LayoutError
from .sympy_gate import is_symbolic, memoized as _memoized

__all__ = ["symbol", "is_symbolic", "norm", "divides", "le", "lt", "eq", "require", "display",
           "ceil_div", "exact_div", "substitute", "hidden_symbols", "Extent", "mod", "attains"]

class Extent(sympy.Symbol):
    """A positive-integer symbol that knows its declared divisor (part of its identity)."""

    __slots__ = ("divisor",)

    def __new__(cls, name: str, divisor: int):
        # Symbol.__xnew__ bypasses sympy's symbol cache, which would share one object between
        # extents of the same name and different divisors.
        obj = sympy.Symbol.__xnew__(cls, name, integer=True, positive=True)
        obj.divisor = divisor
        return obj

    def __getnewargs_ex__(self):
        return (self.name, self.divisor), {}

    def _hashable_content(self):
        return super()._hashable_content() + (self.divisor,)


def symbol(name: str, divisible_by: int = 1) -> Extent:
    """A positive-integer extent named ``name``, known to be a multiple of ``divisible_by``.

    >>> M = symbol("M", 128)
    >>> str(M), str(M / 64), str(ceil_div(M, 64)), str(ceil_div(M, 256))
    ('M', 'M/64', 'M/64', 'ceiling(M/256)')
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise LayoutError(f"symbol name must be a Python identifier, got {name!r}")
    from . import domain
    d = domain.extent(divisible_by, f"symbol({name!r})", "divisible_by")
    if type(d) is not int:
        domain.fail(f"symbol({name!r})", "divisible_by", d, "must be a positive int")
    return Extent(name, d)


def _hidden(x):
    """x with each extent E (a multiple of d) written as d*q for a positive-integer symbol q."""
    x = sympy.sympify(x)
    return x.xreplace({e: e.divisor * sympy.Symbol(f"{e.name}__q{e.divisor}", integer=True, positive=True)
                       for e in x.free_symbols if isinstance(e, Extent)})


def hidden_symbols(x) -> set:
    """The extents (symbol() results) in x."""
    return {e for e in x.free_symbols if isinstance(e, Extent)} if isinstance(x, sympy.Basic) else set()


def norm(x):
    """A sympy result that is a plain integer becomes a Python int; anything else is kept."""
    if isinstance(x, sympy.Integer):
        return int(x)
    if isinstance(x, sympy.Basic) and not x.free_symbols:
        if x.is_integer:
            return int(x)
        raise LayoutError(f"value {x} is not an integer")
    return x


def expand(x):
    """x multiplied out, so that sums of products stay in one canonical form."""
    return x if isinstance(x, sympy.Basic) and _multiplied_out(x) else sympy.expand(x)


def _multiplied_out(x) -> bool:
    """x is a sum of products of numbers, symbols and functions of such, with no sum inside
    a product and no power but 1/y of a symbol or function y (a division by a tile count):
    what sympy.expand returns unchanged (most index arithmetic, whose expansion would cost
    ~0.2 ms of sympy's rebuilding per new expression)."""
    if x.is_Atom:
        return x.is_Symbol or x.is_Rational
    if x.is_Add:
        return all(not a.is_Add and _multiplied_out(a) for a in x.args)
    if x.is_Mul:
        return all(not a.is_Add and not a.is_Mul and _multiplied_out(a) for a in x.args)
    if isinstance(x, (sympy.floor, sympy.ceiling, sympy.Mod)):
        return all(_multiplied_out(a) for a in x.args)
    if x.is_Pow:      # a division by a symbol or a floor (a tile count): no rule applies
        return x.exp is sympy.S.NegativeOne and (x.base.is_Symbol or isinstance(
            x.base, (sympy.floor, sympy.ceiling, sympy.Mod)) and _multiplied_out(x.base))
    return False


def display(x) -> str:
    """The user-facing text of an extent expression."""
    return str(x).replace(" ", "")


def _shifted(expr):
    """expr with every positive-integer symbol h replaced by 1 + h (h >= 1 becomes h' >= 0),
    expanded, so that all its variables range over [0, oo); None when a symbol is not known to
    be nonnegative (then no sign follows from the coefficients)."""
    shift = {}
    for h in expr.free_symbols:
        if h.is_integer and h.is_positive:
            shift[h] = h + 1
        elif not h.is_nonnegative:
            return None
    return sympy.expand(expr.xreplace(shift))


def _bounds(expr):
    """The sign of expr over all symbol values: ">0", ">=0", "<0", "<=0", None, or its value."""
    expr = sympy.sympify(expr)
    if expr.is_Rational:
        return expr
    shifted = _shifted(expr) if expr.is_polynomial(*expr.free_symbols) else None
    if shifted is not None:
        if not shifted.free_symbols:
            return shifted
        poly = sympy.Poly(shifted, *shifted.free_symbols)
        coeffs = poly.coeffs()
        const = poly.as_expr().xreplace({h: 0 for h in shifted.free_symbols})
        if all(c >= 0 for c in coeffs):
            return ">0" if const > 0 else ">=0"
        if all(c <= 0 for c in coeffs):
            return "<0" if const < 0 else "<=0"
        return None
    if expr.is_positive:
        return ">0"
    if expr.is_nonnegative:
        return ">=0"
    if expr.is_negative:
        return "<0"
    if expr.is_nonpositive:
        return "<=0"
    return None


# ---- an extent against an int: the answers below in closed form ------------------------------
# Every tensor extent meets a constant (is it 1? <= the tile? a multiple of it?) once per view:
# E = d*q (q >= 1) against c decides on d and c alone, which _bounds finds the long way round
# (a Poly of the shifted difference). Each closed form is what that general path returns.

def _extent_and_int(a, b):
    """(E, c, E first) when one operand is an extent and the other an int, else None."""
    if type(b) is int and type(a) is Extent:
        return a, b, True
    if type(a) is int and type(b) is Extent:
        return b, a, False
    return None


def _extent_le(pair):
    """le(a, b) of _extent_and_int's pair: c <= E holds when d >= c; E <= c fails when c < d."""
    e, c, first = pair
    if first:
        return False if c < e.divisor else None
    return True if e.divisor >= c else None


def _extent_lt(pair):
    """lt(a, b) of the pair: c < E holds when d > c; E < c fails when c <= d."""
    e, c, first = pair
    if first:
        return False if c <= e.divisor else None
    return True if e.divisor > c else None


def _ceiling_takes(x, c) -> bool:
    """x is ceiling(E/n) (E an extent, n an int) and takes the int value c at some E = k*d: x
    then takes c and, E growing, other values, so that no sound answer to x == c is True or
    False (each tile count of a tensor view, asked whether it is 1)."""
    if type(x) is not sympy.ceiling or type(c) is not int or not 1 <= c <= 1024:
        return False
    arg = x.args[0]
    if not (arg.is_Mul and len(arg.args) == 2 and arg.args[0].is_Rational
            and arg.args[0].p == 1 and type(arg.args[1]) is Extent):
        return False
    n, d = int(arg.args[0].q), arg.args[1].divisor
    return any(-(-k * d // n) == c for k in range(1, c * n // d + 2))


@_memoized
def le(a, b):
    """True/False when a <= b is provable/refutable for all symbol values, else None."""
    pair = _extent_and_int(a, b)
    return _extent_le(pair) if pair is not None else _le_by_bounds(a, b)


def _le_by_bounds(a, b):
    """le's general path: the sign of b - a with each extent written d*q."""
    f = _bounds(_hidden(sympy.sympify(b) - a))
    if isinstance(f, sympy.Basic):
        return bool(f >= 0)
    return True if f in (">0", ">=0") else False if f == "<0" else None


@_memoized
def lt(a, b):
    """True/False when a < b is provable/refutable for all symbol values, else None."""
    pair = _extent_and_int(a, b)
    return _extent_lt(pair) if pair is not None else _lt_by_bounds(a, b)


def _lt_by_bounds(a, b):
    """lt's general path (see _le_by_bounds)."""
    f = _bounds(_hidden(sympy.sympify(b) - a))
    if isinstance(f, sympy.Basic):
        return bool(f > 0)
    return True if f == ">0" else False if f in ("<0", "<=0") else None


@_memoized
def eq(a, b):
    """True/False when a == b is provable/refutable for all symbol values, else None."""
    pair = _extent_and_int(a, b)
    if pair is not None:            # E = d*q never equals c < d; may or may not when c >= d
        return False if pair[1] < pair[0].divisor else None
    if _ceiling_takes(a, b) or _ceiling_takes(b, a):
        return None
    return _eq_by_bounds(a, b)


def _eq_by_bounds(a, b):
    """eq's general path (see _le_by_bounds)."""
    d = sympy.expand(_hidden(sympy.sympify(a) - b))
    if d == 0:
        return True
    f = _bounds(d)
    if isinstance(f, sympy.Basic):
        return bool(f == 0)
    return False if f in (">0", "<0") else None


def _visibly_multiple(d: int, n) -> bool:
    """Whether n is, term by term, an integer multiple of d: each term an integer coefficient
    times integer factors, an extent counting its declared divisor (what ``divides`` would
    prove through sympy.cancel, without it; False only means "not seen this way")."""
    for term, coeff in sympy.sympify(n).as_coefficients_dict().items():
        if not coeff.is_Integer:
            return False
        multiple = int(coeff)
        for factor in term.args if term.is_Mul else (term,):
            base, power = factor.as_base_exp() if factor.is_Pow else (factor, sympy.S.One)
            if isinstance(base, Extent) and power.is_Integer and power > 0:
                multiple *= base.divisor ** int(power)
            elif factor.is_integer is not True:
                return False
        if multiple % d:
            return False
    return True


@_memoized
def divides(d, n):
    """True/False when d | n is provable/refutable for all symbol values, else None."""
    if d == 0:
        return True if n == 0 else None
    if type(d) is int and _visibly_multiple(d, n):
        return True
    q = sympy.cancel(_hidden(sympy.sympify(n) / d))
    if q.is_integer:
        return True
    if q.is_Rational:
        return False
    return None


def require(known, what: str, context: str, cond=None):
    """Pass when ``known`` is True; raise LayoutError saying ``what`` failed or was unprovable.

    ``cond`` = (predicate, operands) re-evaluates the condition; with it, an unprovable
    condition's message names the declared facts it used and a stronger declaration that
    would prove it (see ``deciding_fact``)."""
    if known is True:
        return
    if known is False:
        raise LayoutError(f"{context}: {what} does not hold")
    raise LayoutError(f"{context}: {what} could not be proven from the declared facts"
                      f"{undecided(cond)}")


# ---- what the declared facts are, and which one would decide a condition ----------------------

_MULTIPLIERS = (2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64, 128, 256, 512, 1024)


def _symbols_of(operands) -> list:
    found = set()
    for o in operands:
        if isinstance(o, sympy.Basic):
            found |= o.free_symbols
    return sorted(found, key=lambda e: (e.name, getattr(e, "divisor", 0)))


def fact_of(sym) -> str:
    """What is declared about one symbol, in words."""
    if isinstance(sym, Extent):
        return (f"{sym.name} is a positive multiple of {sym.divisor}" if sym.divisor > 1
                else f"{sym.name} is a positive integer")
    if sym.is_zero:
        return f"{sym.name} is declared zero"
    words = [w for w in ("integer", "positive", "nonnegative", "negative", "nonpositive")
             if getattr(sym, "is_" + w)]
    if "positive" in words:
        words.remove("nonnegative")
    if "negative" in words:
        words.remove("nonpositive")
    if "integer" not in words:
        if sym.is_integer is False:
            words.insert(0, "non-integer")
        elif sym.is_real and not words:
            words.append("real")
    return f"{sym.name} is declared {' and '.join(words)}" if words else \
        f"{sym.name} has no declared facts"


def deciding_fact(cond):
    """A stronger declaration of one extent under which ``predicate(*operands)`` is proven, as
    text (``declare M divisible by 256 (symbol('M', 256))``), or None when no divisor up to
    1024 times the declared one proves it."""
    predicate, operands = cond
    for e in _symbols_of(operands):
        if not isinstance(e, Extent):
            continue
        for m in _MULTIPLIERS:
            repl = {e: Extent(e.name, e.divisor * m)}
            ops = [o.xreplace(repl) if isinstance(o, sympy.Basic) else o for o in operands]
            try:
                if predicate(*ops) is True:
                    d = e.divisor * m
                    return f"declare {e.name} divisible by {d} (symbol({e.name!r}, {d}))"
            except LayoutError:
                continue
    return None


def undecided(cond) -> str:
    """The tail of an 'could not be proven' message: the facts used and a deciding declaration."""
    if cond is None:
        return " (declare divisibility with symbol(name, divisible_by=...))"
    syms = _symbols_of(cond[1])
    facts = "; ".join(fact_of(x) for x in syms)
    known = f" ({facts})" if facts else ""
    fact = deciding_fact(cond)
    if fact:
        return f"{known}; {fact} to decide it"
    names = ", ".join(x.name for x in syms) or "the symbols"
    return f"{known}; it depends on the value of {names}, which no stronger divisibility decides"


def integer(x):
    """True/False when x is/is not an integer for every value of its symbols, else None."""
    known = x.is_integer
    if known is not None:
        return known
    h = _hidden(x)
    if h.is_integer or sympy.cancel(h).is_integer:
        return True
    if not h.free_symbols:
        return False
    return None


def integer_hint(x) -> str:
    """Why x is not provably an integer, and the declaration that would make it one."""
    loose = [s for s in _symbols_of([x]) if not s.is_integer]
    if loose:
        names = ", ".join(s.name for s in loose)
        return (f"{names} is not declared an integer (use symbol({loose[0].name!r}) or "
                f"sympy.Symbol({loose[0].name!r}, integer=True, ...))")
    fact = deciding_fact((lambda v: integer(v), [x]))
    facts = "; ".join(fact_of(s) for s in _symbols_of([x]))
    tail = f"; {fact} to make it one" if fact else ""
    return f"{display(x)} is not provably an integer from the declared facts ({facts}){tail}"


def extent_problem(x):
    """None when x may stand for a positive-integer extent, else the rule it breaks, in words.

    Each symbol must be an integer whose declared facts allow it to be positive: an extent
    (``symbol()``), a Symbol declared ``integer=True, positive=True``, or an integer Symbol of
    undeclared sign (a run-time parameter, such as the DSL's int arguments: that it is >= 1 is
    then the caller's premise, which the prover never assumes). Symbols declared negative,
    nonpositive or zero, and non-integer or real symbols, are refused; the expression must be
    provably an integer, and provably >= 1 when all its symbols are declared positive (not
    provably < 1 otherwise)."""
    rule = "must be a positive integer (an extent)"
    premised = False
    for s in _symbols_of([x]):
        if isinstance(s, Extent) or (s.is_integer and s.is_positive):
            continue
        if s.is_integer and s.is_positive is None and s.is_nonpositive is not True:
            premised = True
            continue
        return (f"{rule}; {fact_of(s)}, not a positive integer (use symbol({s.name!r}) or "
                f"sympy.Symbol({s.name!r}, integer=True, positive=True))")
    known = integer(x)
    if known is False:
        return f"{rule}; this expression is never an integer"
    if known is None:
        return f"{rule}; {integer_hint(x)}"
    at_least_one = le(1, x)
    if at_least_one is False:
        return f"{rule}; it is < 1 for every value of its symbols"
    if at_least_one is None and not premised:
        return f"{rule}; it could not be proven >= 1 from the declared facts{undecided((lambda v: le(1, v), [x]))}"
    return None


def exact_div(n, d, context: str):
    """n / d, proven exact."""
    require(divides(d, n), f"{display(d)} divides {display(n)}", context, (divides, [d, n]))
    return norm(sympy.cancel(sympy.sympify(n) / d))


@_memoized
def ceil_div(a, b):
    """ceiling(a / b) for positive b, simplified."""
    if type(a) is Extent and type(b) is int and b > 0:   # E/b is exact exactly when b | d
        # sympy proves nothing of E/b (a positive integer over b > 1 of unknown size and
        # parity) and returns ceiling(E/b) as built: its evaluation, skipped here, is ~2 ms
        # of assumption queries the first time a process meets each extent
        return a / b if a.divisor % b == 0 else sympy.ceiling(a / b, evaluate=False)
    return _ceil_div_general(a, b)


def _ceil_div_general(a, b):
    """ceil_div's general path: the quotient when b provably divides a, 1 when 0 < a <= b."""
    q = sympy.cancel(sympy.sympify(a) / b)
    if divides(b, a):
        return norm(q)
    if lt(0, a) and le(a, b):
        return 1
    return norm(sympy.ceiling(q))


def _plain_counter(p) -> bool:
    """p is a symbol of which sympy knows only that it is a nonnegative integer (a thread or
    loop index, a nonnegative extent): no parity, no upper bound."""
    return isinstance(p, sympy.Symbol) and p.is_integer is True and p.is_nonnegative is True \
        and p.is_even is None


def _unbounded_term(x, depth: int = 0) -> bool:
    """x is a plain counter s, floor(r*u + b) (r = +-1/d, d >= 2, b rational, u such a term) or,
    inside a sum, -u: an integer with no upper or no lower bound and no parity that sympy can
    prove, and a polynomial generator of content 1 (a ring counter, a tile count
    -floor(-E/d), a phase floor(counter/stages)). Inside a sum (depth > 0) also a floor, Max or
    Min that some counter steps through every integer of a ray (_counter_walk)."""
    if _plain_counter(x):
        return True
    if depth > 3:
        return False
    if x.is_Mul and len(x.args) == 2 and x.args[0] is sympy.S.NegativeOne:
        return depth > 0 and _unbounded_term(x.args[1], depth + 1)
    if type(x) is sympy.floor:
        const, lin = x.args[0].as_coeff_Add()
        coeff, u = lin.as_coeff_Mul()
        if const.is_Rational and coeff.is_Rational and abs(coeff.p) == 1 and coeff.q >= 2 \
                and _unbounded_term(u, depth + 1):
            return True
    elif type(x) not in (sympy.Max, sympy.Min):
        return False
    return depth > 0 and bool(_counter_walk(x, 0))


MAX_WALK_DEPTH = 8       # nesting _counter_walk follows (a phase of Max(1, Min(...)) blocks: 6)


def _counter_walk(x, depth: int) -> dict:
    """{counter s: +1 or -1} for each plain counter s along which the integer x, the other
    symbols held, runs through every integer of a ray: x is monotone in s (+1 nondecreasing,
    -1 nonincreasing), changes by at most 1 per step of s and has no bound that way. Such an x
    takes both parities, every residue and no bound on that side at some point of sympy's
    domain, so sympy (sound) proves none of them -- the facts Mod's evaluation asks of a term
    (a phase floor((k + tile * K_TILES) / stages), causal attention's key-block counts
    Max(1, Min(...)) and their phases): a counter s, +-1 * a walked term, a sum in which s
    lies in one term only with coefficient +-1, floor(b + sum) whose term walked by s has a
    coefficient of magnitude <= 1 and is the only one holding s, Max / Min of arguments walked
    the same way by s or free of it (Max: one walked argument enough one way, all the other;
    Min the reverse)."""
    if depth > MAX_WALK_DEPTH or x.is_Number:
        return {}
    if _plain_counter(x):
        return {x: 1}
    if x.is_Add or (x.is_Mul and x.args[0].is_Number):
        return _sum_walk(x.args if x.is_Add else (x,), depth, integer=True)
    if type(x) is sympy.floor:
        return _sum_walk(sympy.Add.make_args(x.args[0]), depth, integer=False)
    if type(x) not in (sympy.Max, sympy.Min):
        return {}
    walks = [(_counter_walk(a, depth + 1), a.free_symbols) for a in x.args]
    out = {}
    for s in set().union(*(w for w, _ in walks)):
        for sign in (1, -1):
            walked = [w.get(s) == sign for w, _ in walks]
            free = [s not in symbols for _, symbols in walks]
            # Max grows with one argument that grows, the others held; it falls only if all fall
            one_way = (type(x) is sympy.Max) == (sign == 1)
            if all(a or f for a, f in zip(walked, free)) and (any(walked) if one_way else
                                                              all(walked)):
                out[s] = sign
    return out


def _sum_walk(terms, depth: int, integer: bool) -> dict:
    """_counter_walk of the sum of `terms`: coefficients +-1 (`integer`: a sum of integers) or
    of magnitude <= 1 (a floor's argument)."""
    walks, holders = {}, {}
    for term in terms:
        coeff, rest = term.as_coeff_Mul()
        if not coeff.is_Rational or rest is sympy.S.One:
            continue
        for s in rest.free_symbols:
            holders[s] = holders.get(s, 0) + 1
        if (abs(coeff) == 1 if integer else abs(coeff) <= 1):
            for s, sign in _counter_walk(rest, depth + 1).items():
                walks[s] = sign if coeff > 0 else -sign
    return {s: sign for s, sign in walks.items() if holders[s] == 1}


def _free_terms(p):
    """(constant, terms) of p = c + sum of k_i * u_i1 * u_i2 ... (ints c and k_i, each u an
    _unbounded_term, the terms over disjoint symbols: no cancellation bounds the sum), or None."""
    const, terms = p.as_coeff_add() if p.is_Add else (sympy.S.Zero, (p,))
    if not const.is_Integer:
        return None
    seen = set()
    for term in terms:
        coeff, rest = term.as_coeff_Mul()
        if not coeff.is_Integer or not all(_unbounded_term(u, 1) for u in sympy.Mul.make_args(rest)):
            return None
        symbols = rest.free_symbols
        if symbols & seen:
            return None
        seen |= symbols
    return int(const), terms


def attains(x, c: int) -> bool:
    """x is a counter s, floor(s/d) or Mod(y, q) of such a y (a thread, lane or warp index) and
    takes the value c at some point of sympy's domain and another value at another: sympy's
    is_eq(x, c) is then undecided (sympy is sound), and Eq(x, c) stays as built, without the
    assumption queries that find nothing (~2-10 ms for each new x)."""
    if type(x) is sympy.Mod:
        y, q = x.args
        return q.is_Integer and 2 <= int(q) and 0 <= c < int(q) and _least_value(y) is not None
    least = _least_value(x)
    return least is not None and c >= least


def _least_value(x):
    """v when x takes every integer value >= v and no other (a counter s: 0, or 1 for a
    positive one such as an extent; floor(s/d), d >= 2: 0), else None."""
    if _plain_counter(x):
        return 1 if x.is_positive else 0
    if type(x) is not sympy.floor:
        return None
    coeff, s = x.args[0].as_coeff_Mul()
    return 0 if coeff.is_Rational and coeff.p == 1 and coeff.q >= 2 and _plain_counter(s) \
        else None


def mod(p, q):
    """sympy.Mod(p, q), built directly for an int q >= 2 and p = c + sum of k_i * (products of
    _unbounded_terms) over disjoint symbols, no k_i a multiple of q, gcd(k.., c, q) = 1 (and an
    odd k_i for q = 2): sympy's evaluation then proves nothing of p (a bound, its parity, a
    common factor, a term that vanishes) and returns Mod(p - c + c % q, q) -- after ~1-10 ms of
    assumption queries per new expression, the first time a process meets it (each ring
    counter's stage and phase). A lone term keeps coefficient 1 (sympy writes Mod(-u, q) as
    Mod((q-1)*u, q))."""
    if isinstance(q, sympy.Integer):
        q = int(q)
    if type(q) is not int or q < 2 or not isinstance(p, (sympy.Symbol, sympy.Add, sympy.Mul,
                                                         sympy.floor)):
        return sympy.Mod(p, q)
    found = _free_terms(p)
    if found is None:
        return sympy.Mod(p, q)
    const, terms = found
    coeffs = [int(t.as_coeff_Mul()[0]) for t in terms]
    if any(k % q == 0 for k in coeffs) or math.gcd(q, const, *coeffs) != 1 or \
            (q == 2 and all(k % 2 == 0 for k in coeffs)):
        return sympy.Mod(p, q)
    rest = const % q
    if rest:
        built = p if rest == const else sympy.Add(rest, *terms)
    else:
        built = terms[0] if len(terms) == 1 else sympy.Add(*terms)
    if not built.is_Add and coeffs[0] != 1:
        return sympy.Mod(p, q)
    return sympy.Mod(built, q, evaluate=False)


def substitute(x, values: dict):
    """x with extents replaced per ``values`` (Extent -> int), as an int when closed."""
    if not isinstance(x, sympy.Basic):
        return x
    return norm(x.xreplace({e: v for e, v in values.items() if e in x.free_symbols}))


def resolve(mapping: dict, present: set) -> dict:
    """Turn a user mapping {symbol() result or its name: int} into {Extent: int}.

    Raises LayoutError when a value violates the declared divisibility or is not positive.
    """
    out = {}
    for key, value in mapping.items():
        if isinstance(key, str):
            targets = [e for e in present if e.name == key]
        elif isinstance(key, Extent):
            targets = [key]
        else:
            raise LayoutError(f"subs: key {key!r} is neither a symbol() result nor a symbol name")
        if type(value) is not int:
            from . import domain
            value = domain.integer(value, "subs", f"value of {key}")
            if type(value) is not int:
                domain.fail("subs", f"value of {key}", value, "must be an int (subs closes symbols)")
        for e in targets:
            if value < 1 or value % e.divisor:
                raise LayoutError(f"subs: {e.name}={value} violates the declared facts "
                                  f"({e.name} is a positive multiple of {e.divisor})")
            out[e] = value
    return out
