"""layoutkit.dsl.lower: a verified IR `Function` to PTX text through layoutkit.ptx's builder."""
from .function import Lowering, lower

__all__ = ["Lowering", "lower"]
