"""layoutkit.algebra: CuTe's layout algebra in plain Python, integer and symbolic (sympy).

Imports: stdlib and sympy only, so it runs in a notebook with no CUDA.
"""
