"""layoutkit: hand-written Hopper kernels with explicit layouts. Import as ``import layoutkit as lk``."""
from layoutkit import algebra

__all__ = ["algebra"]
__version__ = "0.1.0"
