"""The one exception type of layoutkit.algebra."""
from __future__ import annotations

__all__ = ["LayoutError"]


class LayoutError(ValueError):
    """An algebra operation is undefined for its operands, or a value is malformed.

    The message names the operation, the operands and the condition that failed
    (with the values that failed it). For symbolic operands it says when a
    condition could not be proven from the declared facts.
    """
