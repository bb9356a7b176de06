"""layoutkit.dsl.sm90.wgmma: warpgroup MMA - the op and its fence/commit/wait (`mma`), the
register layouts of its accumulator and A fragment (`layouts`), shared operands checked against
the canonical layouts and turned into descriptors (`operands`), the accumulator-use rules
(`accumulators`), the IR ops' definitions (`ops`).
"""
from . import ops  # noqa: F401  (registers the wgmma ops)
from .accumulators import AccumulatorUseError
from .mma import (warpgroup_stack, wgmma, wgmma_a_layout, wgmma_accumulator,
                  wgmma_accumulator_layout, wgmma_commit, wgmma_fence, wgmma_wait)

__all__ = ["AccumulatorUseError", "warpgroup_stack", "wgmma", "wgmma_a_layout",
           "wgmma_accumulator", "wgmma_accumulator_layout", "wgmma_commit", "wgmma_fence",
           "wgmma_wait"]
