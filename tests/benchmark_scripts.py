"""Loading a script of benchmarks/ as a module in a test (the scripts are no package)."""
import contextlib
import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@contextlib.contextmanager
def loaded_benchmark(filename: str):
    """benchmarks/<filename> executed as a fresh module, registered in sys.modules under
    "<stem>_under_test" while the block runs (its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(f"{Path(filename).stem}_under_test",
                                                  BENCHMARKS / filename)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)
