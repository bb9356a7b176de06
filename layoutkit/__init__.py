"""layoutkit: hand-written Hopper kernels with explicit layouts. ``import layoutkit as lk``.

The public surface: the layout algebra (``lk.Layout``, ``lk.composition``, ...), the kernel
language (``lk.kernel``, ``lk.global_tensor``, ``lk.load``, ``lk.range``, ...), and the packages
themselves for the lower levels: ``lk.algebra``, ``lk.dsl``, ``lk.sync``, ``lk.ptx``.

The packages load at their first use (PEP 562): ``import layoutkit.algebra`` for layout
algebra in a notebook loads neither the DSL, the PTX layer, numpy nor (for integer layouts)
sympy; the first ``lk.kernel`` (or any DSL name) loads the DSL.
"""
import importlib

SUBPACKAGES = ("algebra", "dsl", "ptx", "sync")
__version__ = "0.1.0"


def _load_dsl():
    """Import the DSL, install lk.autotune's default timer (the interleaved CUDA-event timer of
    layoutkit.tools: the DSL may not import the tools, which sit above it; torch is imported
    only when it times) and publish the DSL's names here."""
    dsl = importlib.import_module("layoutkit.dsl")
    from layoutkit.tools.benchmarking import interleaved
    dsl.core.autotune.set_default_timer(interleaved)
    globals().update({name: getattr(dsl, name) for name in dsl.__all__})
    return dsl


def __getattr__(name):
    if name == "__all__":
        algebra = importlib.import_module("layoutkit.algebra")
        return [*SUBPACKAGES, *algebra.__all__, *_load_dsl().__all__]
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in SUBPACKAGES:
        return _load_dsl() if name == "dsl" else importlib.import_module(f"layoutkit.{name}")
    algebra = importlib.import_module("layoutkit.algebra")
    if name in algebra.__all__:
        value = globals()[name] = getattr(algebra, name)
        return value
    dsl = _load_dsl()
    if name in dsl.__all__:
        return getattr(dsl, name)
    raise dsl.missing_attribute(__name__, name)     # lk.sm90.tma_load names lk.sm90.tma_load


def __dir__():
    algebra = importlib.import_module("layoutkit.algebra")
    dsl = _load_dsl()
    return sorted({*globals(), *SUBPACKAGES, *algebra.__all__, *dsl.__all__})

