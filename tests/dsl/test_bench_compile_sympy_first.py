"""benchmarks/bench_compile.py --sympy-first: sympy's import (and the modules its first sum
imports) timed before the compile and shown beside the recipe's import, not in its first
specialization's trace."""
from __future__ import annotations

import sys

from tests.benchmark_scripts import loaded_benchmark


def test_import_sympy_loads_what_the_first_sum_imports():
    with loaded_benchmark("bench_compile.py") as bench:
        seconds = bench.import_sympy(cpu_time=True)
    assert seconds >= 0.0 and "sympy.tensor.tensor" in sys.modules


def _result(sympy_import):
    row = {"name": "k", "fresh": True, "trace": 0.1, "verify": 0.001, "check": 0.05,
           "lower": 0.02, "ptxas": 0.3}
    return {"recipe": "r", "rows": [row], "import": 0.4, "on_cpu": 1.0, "host": 0.0,
            "sympy_import": sympy_import}


def test_total_row_names_sympys_share_of_the_import():
    with loaded_benchmark("bench_compile.py") as bench:
        with_sympy = bench.table_rows([_result(0.25)])[-1][1]
        without = bench.table_rows([_result(None)])[-1][1]
    assert with_sympy == "all 1 (import 400 ms, of it sympy 250 ms; on a CPU 100% of the time)"
    assert without == "all 1 (import 400 ms; on a CPU 100% of the time)"
