"""layoutkit: hand-written Hopper kernels with explicit layouts. ``import layoutkit as lk``.

The public surface: the layout algebra (``lk.Layout``, ``lk.composition``, ...), the kernel
language (``lk.kernel``, ``lk.global_tensor``, ``lk.load``, ``lk.range``, ...), and the packages
themselves for the lower levels: ``lk.algebra``, ``lk.dsl``, ``lk.sync``, ``lk.ptx``.
"""
from layoutkit import algebra, dsl, ptx, sync
from layoutkit.algebra import *  # noqa: F401,F403
from layoutkit.dsl import *  # noqa: F401,F403  (includes lk.range and lk.if_)

__all__ = ["algebra", "dsl", "ptx", "sync", *algebra.__all__, *dsl.__all__]

# lk.autotune times candidates with the interleaved CUDA-event timer of layoutkit.tools (the
# DSL may not import the tools, which sit above it); torch is imported only when it times.
from layoutkit.tools.benchmarking import interleaved as _interleaved  # noqa: E402
dsl.core.autotune.set_default_timer(_interleaved)
__version__ = "0.1.0"


def __getattr__(name):
    raise dsl.missing_attribute(__name__, name)     # lk.sm90.tma_load names lk.sm90.tma_load
