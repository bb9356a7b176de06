"""TRANSITION ONLY: empty. The sm_80 ops (cp_async and its groups, ldmatrix, mma_sync) are
interpreted by their definitions in layoutkit/dsl/sm80/ops.py (machinery: sm80/machine.py);
this module stays only because core/legacy_ops.py still imports it, and goes with that."""
