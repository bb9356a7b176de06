"""layoutkit.dsl.sm90.wgmma: warpgroup MMA - the op and its fence/commit/wait, the register
layouts of its accumulator and A fragment (`layouts`), shared operands checked against the
canonical layouts and turned into descriptors (`operands`), the accumulator-use rules
(`accumulators`).
"""
from .accumulators import AccumulatorUseError
from .ops import (warpgroup_stack, wgmma, wgmma_a_layout, wgmma_accumulator,
                  wgmma_accumulator_layout, wgmma_commit, wgmma_fence, wgmma_wait)

__all__ = ["AccumulatorUseError", "warpgroup_stack", "wgmma", "wgmma_a_layout",
           "wgmma_accumulator", "wgmma_accumulator_layout", "wgmma_commit", "wgmma_fence",
           "wgmma_wait"]
