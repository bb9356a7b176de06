"""Defining layoutkit's operators in torch's dispatcher: one `OpSpec` per operator, `define`
turning it into `torch.ops.layoutkit.<name>` once per process.

Every operator has the same parts, so every registration is the same few calls:

    schema    the operator's signature in torch's schema language (no argument is mutated)
    outputs   (*args) -> the output tensor(s), empty and contiguous, on the inputs' device,
              after checking the arguments (ValueError / TypeError naming the argument, value
              and rule): the fake (meta) implementation, so torch.compile and FakeTensorMode
              learn shapes, dtypes and strides without running a kernel
    cuda      (*args) -> outputs: the same checks, then the recipe's kernel on the GPU (into
              the buffers `outputs` made, where the recipe takes an `out`)
    cpu       (*args) -> outputs: the same checks, then the same kernel in layoutkit's CPU
              interpreter (interpreted.py), into the buffers `outputs` made
    backward, setup_context   torch.library.register_autograd's pair, where the op has one

Tensors of other devices get torch's own "could not run ... with arguments from the X
backend" error.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch

NAMESPACE = "layoutkit"


@dataclass(frozen=True)
class OpSpec:
    """One operator: see the module docstring for each part."""

    name: str
    schema: str
    outputs: Callable
    cuda: Callable
    cpu: Callable
    backward: Callable | None = None
    setup_context: Callable | None = None

    @property
    def qualname(self) -> str:
        return f"{NAMESPACE}::{self.name}"


def is_defined(name: str) -> bool:
    """Whether torch's dispatcher already holds layoutkit::<name> (defined by an earlier import
    of this package in the process, e.g. before its modules were dropped from sys.modules)."""
    return hasattr(getattr(torch.ops, NAMESPACE), name)


def define(spec: OpSpec):
    """Register `spec` as torch.ops.layoutkit.<name> (implementations, fake, autograd) unless
    it is registered already; returns the op's OpOverloadPacket either way."""
    if not is_defined(spec.name):
        complete = _default_filler(spec)
        op = torch.library.custom_op(spec.qualname, complete(spec.cuda), mutates_args=(),
                                     device_types="cuda", schema=spec.schema)
        op.register_kernel("cpu")(complete(spec.cpu))
        op.register_fake(complete(spec.outputs))
        if spec.backward is not None:
            op.register_autograd(spec.backward, setup_context=spec.setup_context)
    return getattr(getattr(torch.ops, NAMESPACE), spec.name)


def _default_filler(spec: OpSpec) -> Callable:
    """A wrapper maker: the dispatcher leaves out trailing arguments equal to their schema
    default when it calls a Python implementation, so each implementation is called with every
    argument, positionally, the left-out ones filled from the schema (defaults live there only)."""
    parsed = torch._C.parse_schema(spec.qualname + spec.schema)
    names = [a.name for a in parsed.arguments]
    defaults = {a.name: a.default_value for a in parsed.arguments if a.has_default_value()}

    def complete(fn: Callable) -> Callable:
        def call(*args, **kwargs):
            rest = [kwargs[name] if name in kwargs else defaults[name]
                    for name in names[len(args):]]
            return fn(*args, *rest)
        call.__name__ = call.__qualname__ = fn.__name__
        return call
    return complete


def recipe(module: str, op: str):
    """recipes.<module>, imported on first use; NotImplementedError naming the op when this
    checkout has no such recipe (a backward kernel not written yet)."""
    try:
        return importlib.import_module(f"recipes.{module}")
    except ModuleNotFoundError as exc:
        if exc.name != f"recipes.{module}":
            raise
        raise NotImplementedError(f"layoutkit.{op}: this checkout has no recipes/{module}.py, "
                                  "the kernel it runs") from None
