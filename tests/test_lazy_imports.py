"""What each import loads, in a fresh process: `import layoutkit.algebra` for integer layouts
loads neither sympy, numpy nor the DSL; a symbol loads sympy; the first DSL name loads the DSL
and installs lk.autotune's timer (layoutkit/__init__.py, layoutkit/algebra/sympy_gate.py); the
DSL and every recipe load sympy at the first trace, not at import (sympy_gate's stand-in)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def loaded_after(code: str) -> dict:
    """Run `code` in a new interpreter; it sets `out` (a dict), which comes back as JSON."""
    script = "import sys, json\nout = {}\n" + textwrap.dedent(code) + "\nprint(json.dumps(out))"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_integer_algebra_loads_no_sympy_numpy_or_dsl():
    out = loaded_after("""
        import layoutkit.algebra as A
        out["at_import"] = sorted(m for m in ("sympy", "numpy", "layoutkit.dsl", "layoutkit.ptx")
                                  if m in sys.modules)
        L = A.Layout((4, 8), (8, 1))
        out["results"] = [str(A.composition(L, A.Layout(4, 2))), A.cosize(L),
                          str(A.logical_divide(L, A.Layout(2))), A.less(3, 4),
                          A.divides(4, 12), str(A.complement(A.Layout(4, 2), 16))]
        A.layout_svg(L); A.layout_latex(L); A.bank_conflicts(A.Layout((32, 32), (32, 1)), A.Layout((32, 32), (1, 32)), dtype_bytes=4)
        out["after_int_use"] = "sympy" in sys.modules
        M = A.symbol("M", 128)
        out["symbolic"] = str(A.Layout((M, 64), (64, 1)))
        out["after_symbol"] = "sympy" in sys.modules
    """)
    assert out["at_import"] == []
    assert out["results"] == ["(2,2):(16,1)", 32, "(2,(2,8)):(8,(16,1))", True, True,
                              "(2,2):(1,8)"]
    assert out["after_int_use"] is False
    assert out["symbolic"] == "(M,64):(64,1)" and out["after_symbol"] is True


def test_the_first_dsl_name_loads_the_dsl_and_installs_the_autotune_timer():
    out = loaded_after("""
        import layoutkit as lk
        out["bare"] = "layoutkit.dsl" in sys.modules
        out["kernel"] = lk.kernel.__module__
        from layoutkit.dsl.core import autotune
        out["timer"] = autotune._DEFAULT_TIMER[0].__module__
        out["layout"] = lk.Layout.__module__
        out["sm90"] = lk.sm90.wgmma.__name__
        try:
            lk.tma_load
        except AttributeError as e:
            out["moved"] = str(e)
        try:
            lk.no_such_name
        except AttributeError as e:
            out["missing"] = type(e).__name__
        names = {}
        exec("from layoutkit import *", names)
        out["star"] = all(n in names for n in ("kernel", "Layout", "sm90", "composition"))
        out["dir"] = "kernel" in dir(lk) and "Layout" in dir(lk)
    """)
    assert out["bare"] is False
    assert out["kernel"].startswith("layoutkit.dsl")
    assert out["timer"] == "layoutkit.tools.benchmarking"
    assert out["layout"] == "layoutkit.algebra.layout" and out["sm90"] == "wgmma"
    assert "lk.sm90.tma_load" in out["moved"]
    assert out["missing"] == "AttributeError"
    assert out["star"] and out["dir"]


def test_the_dsl_and_the_recipes_load_sympy_at_the_first_trace_not_at_import():
    """No sympy before a trace means no trace: importing a recipe does no compile work."""
    out = loaded_after("""
        import importlib, pkgutil
        import layoutkit.dsl as lk
        from layoutkit.algebra import Layout
        import recipes
        for module in pkgutil.iter_modules(recipes.__path__):
            importlib.import_module(f"recipes.{module.name}")
        @lk.kernel(num_warps=1)
        def copy(x: lk.Pointer[lk.f32], y: lk.Pointer[lk.f32], n: lk.i32):
            tv = lk.tv_layout(Layout(32), Layout(4))
            X = lk.global_tensor(x, Layout(n)).tile((128,), (lk.block_id(0),)).partition(tv)
            Y = lk.global_tensor(y, Layout(n)).tile((128,), (lk.block_id(0),)).partition(tv)
            lk.store(Y, lk.load(X))
        out["at_import"] = "sympy" in sys.modules
        bounds, kernel = (sys.modules[f"layoutkit.dsl.core.{m}"] for m in ("bounds", "kernel"))
        out["stand_in"] = type(bounds.sympy).__name__
        ir = str(copy.ir(lk.Pointer[lk.f32], lk.Pointer[lk.f32], 4096))
        out["traced"] = "sympy" in sys.modules and "load" in ir
        out["bound"] = [m.sympy is sys.modules["sympy"] for m in (bounds, kernel)]
    """)
    assert out["at_import"] is False and out["stand_in"] == "_SympyStandIn"
    assert out["traced"] is True and out["bound"] == [True, True]
