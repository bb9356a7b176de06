"""PyTorch, layoutkit's optional dependency: what the recipes' entry points, `layoutkit run` and
the tour's GPU part need, and the one line that says how to install it where it is missing.

The core (algebra, PTX, the DSL, its CPU interpreter, `layoutkit compile`, `layoutkit run
--cpu`) runs without torch; tensors a kernel launches on are torch tensors, so every entry that
takes them asks for torch through `require_torch`.

    >>> require_torch("softmax").__name__
    'torch'
"""
from __future__ import annotations

import importlib
import importlib.util
import sys

TORCH_INSTALL = 'pip install "layoutkit[torch]" (from a checkout: pip install -e ".[torch]")'


class MissingDependencyError(ImportError):
    """An optional dependency of layoutkit is not installed; the message says what to install."""


def torch_missing_message(who: str) -> str:
    """The one line naming what needs torch and how to install it.

    >>> print(torch_missing_message("layoutkit run"))  # doctest: +NORMALIZE_WHITESPACE
    layoutkit run needs PyTorch, which is not installed: pip install "layoutkit[torch]"
    (from a checkout: pip install -e ".[torch]")
    """
    return f"{who} needs PyTorch, which is not installed: {TORCH_INSTALL}"


def require_torch(who: str):
    """The torch module; MissingDependencyError naming `who` and the install command when torch
    cannot be imported (a broken torch install raises its own error)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch
    try:
        return importlib.import_module("torch")
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise MissingDependencyError(torch_missing_message(who)) from None


def torch_installed() -> bool:
    """Whether torch can be imported (without importing it)."""
    if "torch" in sys.modules:
        return sys.modules["torch"] is not None
    return importlib.util.find_spec("torch") is not None
