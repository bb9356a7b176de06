"""layoutkit.ptx: the PTX builder, ptxas and the cubin cache, and the cuda-python launcher.

Imports: stdlib, numpy and (lazily) cuda-python. Knows nothing about layouts.
"""
