"""The host path of a repeated GEMM call (recipes/gemm_hopper.py's gemm, recipes/gemm_fp8.py's
gemm_fp8): one Plan per call signature (shapes, strides and dtypes of every tensor, a's device,
the config and the call's other hashable facts: gemm's activation, alpha's and beta's types and
whether they are 1 and 0, out_dtype, whether out was given), made after a call of that
signature passed its checks and launched its operands as they are (no TMA copy, no copy of C
into out). A later call of the signature checks what can differ between the two (the tensors'
exact type, every tensor on a's CUDA device, the 16-byte alignment of a, b, out and the inputs
the kernel TMAs, out overlapping an input) and launches the remembered kernel[grid] functions
with their constexprs, positionally; the arguments after a, b and C come from the recipe's own
function of (out, inputs, scalars). Any doubt gives None and the entry takes its checked path,
which words every error; the epilogue's arguments and the split-K workspace come from the
functions here, which the recipes' `launches` use too.
"""
from __future__ import annotations

from dataclasses import dataclass

from recipes import _gemm_host as host

__all__ = ["MAX_PLANS", "Plan", "epilogue_arguments", "launch", "remember", "signature",
           "workspace"]

MAX_PLANS = 256
_PLANS: dict = {}          # signature -> Plan


def epilogue_arguments(epilogue, out, bias, residual, alpha, beta, m: int, n: int) -> list:
    """The kernel arguments after a, b, c of `epilogue` (recipes._epilogues.Epilogue), in its
    parameters' order: C (out itself), the bias as an (M, N) view of strides (0, stride), the
    residual, then alpha and beta as floats."""
    extra = []
    if epilogue.c is not None:
        extra.append(out)
    if bias is not None:
        extra.append(bias.expand(m, n))
    if residual is not None:
        extra.append(residual)
    return extra + [float(alpha)] * epilogue.scaled + [float(beta)] * (epilogue.c is not None)


def workspace(torch, device, rows: int, padded: int, n: int) -> tuple:
    """The split-K f32 workspace, `rows` rows `padded` elements apart (TMA-ready): (the whole
    buffer, which the partials' TMA stores write, rows of a last 16-byte chunk included; its
    first n columns, which the reduction reads)."""
    buf = torch.empty(rows, padded, device=device, dtype=torch.float32)
    return buf, buf[:, :n]


def _layout(tensor, x):
    """(shape, strides, dtype) of an exact `tensor` (torch.Tensor), None for None; False for
    anything else (no plan serves it)."""
    if x is None:
        return None
    return type(x) is tensor and (x.shape, x.stride(), x.dtype)


def signature(tensor, a, b, out, config, inputs: tuple, facts: tuple):
    """The plan key of a call (module docstring): its tensors a, b, out and `inputs` (the
    recipe's other optional tensors: gemm's bias and residual, gemm_fp8's scales), the config
    and `facts` (the call's other hashable values that pick its kernels); None where no plan
    can serve it."""
    if type(a) is not tensor or type(b) is not tensor:
        return None
    layouts = (_layout(tensor, out), *(_layout(tensor, x) for x in inputs))
    if False in layouts:
        return None
    return (a.shape, a.stride(), a.dtype, b.shape, b.stride(), b.dtype, *layouts, config,
            *facts, a.get_device())


@dataclass(frozen=True)
class Plan:
    """What a call of one signature launches: `steps` (kernel[grid], constexpr values) in order;
    `kmajor`: b goes as b.t(); `arguments(out, inputs, scalars)`: the kernel arguments after
    a, b and C (and after the workspace and C of a split-K reduction); `split`: (rows, padded)
    of the workspace, or None; `spans`: the bytes out, a, b and each input span (0: absent);
    `tma_inputs`: the inputs the kernel TMAs (16-byte aligned); `aliased`: the input that may be
    out itself (the same strides and dtype, read where it is written), or None; `out_dtype`: the
    dtype of an out the entry allocates."""

    m: int
    n: int
    kmajor: bool
    arguments: object
    steps: tuple
    split: tuple | None
    spans: tuple
    tma_inputs: tuple
    aliased: int | None
    out_dtype: object
    device: int

    def run(self, torch, a, b, out, inputs: tuple, scalars: tuple):
        """Launch for these tensors (of the plan's signature); returns out, or None where a
        per-call fact differs (the entry's checked path then runs)."""
        device = self.device
        for x in (a, b, out, *inputs):
            if x is not None and (not x.is_cuda or x.get_device() != device):
                return None
        p_a, p_b = a.data_ptr(), b.data_ptr()
        if (p_a | p_b) % host.TMA_ALIGN_BYTES or any(
                inputs[i].data_ptr() % host.TMA_ALIGN_BYTES for i in self.tma_inputs):
            return None
        if out is None:
            out = torch.empty(self.m, self.n, device=a.device, dtype=self.out_dtype)
            if out.data_ptr() % host.TMA_ALIGN_BYTES:
                return None
        else:
            lo = out.data_ptr()
            if lo % host.TMA_ALIGN_BYTES or self._overlap(lo, p_a, p_b, inputs):
                return None
        b_op = b.t() if self.kmajor else b
        extra = self.arguments(out, inputs, scalars)
        if self.split is None:
            (gemm_launch, constexprs), = self.steps
            gemm_launch(a, b_op, out, *extra, *constexprs)
        else:
            (first, split), (reduce, splits) = self.steps
            ws_stored, ws = workspace(torch, a.device, *self.split, self.n)
            first(a, b_op, ws_stored, *split)
            reduce(ws, out, *extra, *splits)
        return out

    def _overlap(self, lo: int, p_a: int, p_b: int, inputs: tuple) -> bool:
        """Whether out (at `lo`) may share bytes with an input (host.require_no_overlap's rule
        on the signature's spans; the aliased input at out's address is out itself)."""
        out_span, a_span, b_span, *input_spans = self.spans
        hi = lo + out_span
        spans = [(p_a, a_span), (p_b, b_span)]
        for i, (x, span) in enumerate(zip(inputs, input_spans)):
            if x is not None and not (i == self.aliased and x.data_ptr() == lo):
                spans.append((x.data_ptr(), span))
        return any(span and start < hi and lo < start + span for start, span in spans)


def _span(x) -> int:
    """The bytes the elements of tensor `x` span (0 for None or no elements)."""
    if x is None:
        return 0
    lo, hi = host._bytes(x)         # the overlap rule's span
    return hi - lo


def remember(key, steps: list, c, a, b, out, out_given: bool, inputs: tuple, arguments, *,
             tma_inputs: tuple = (), aliased: int | None = None) -> None:
    """Keep the Plan of a checked call of signature `key` (None: none) that launched `steps`
    ((kernel, grid, args, constexprs) per launch: the recipe's `launches`) with C landing in
    `c`, where it launched a, b (or b.t()), out and the inputs of `tma_inputs` as they are and
    every kernel takes its constexprs last, in their order. `arguments(out, inputs, scalars)`
    gives a later call's arguments after a, b and C; `aliased`: the input that may be out."""
    if key is None or c is not out:
        return
    first = steps[0][2]
    b_op = first[1]
    kmajor = b_op is not b
    if first[0] is not a or (kmajor and not (
            b_op.data_ptr() == b.data_ptr() and tuple(b_op.shape) == tuple(b.shape)[::-1]
            and b_op.stride() == b.stride()[::-1])):
        return
    for i in tma_inputs:        # else the kernel TMAs a TMA-ready copy of it
        if inputs[i] is not None and not any(x is inputs[i] for *_, args, _ in steps
                                             for x in args):
            return
    launches = []
    for kernel, grid, args, constexprs in steps:
        names = [p.name for p in kernel.params]
        if names[len(names) - len(constexprs):] != list(constexprs):
            return
        launches.append((kernel[grid], tuple(constexprs.values())))
    ws = first[2] if len(steps) == 2 else None
    m, n = out.shape
    alias = inputs[aliased] if aliased is not None else None
    same = alias is not None and alias.stride() == out.stride() and alias.dtype == out.dtype
    if len(_PLANS) >= MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = Plan(m, n, kmajor, arguments, tuple(launches),
                       None if ws is None else (ws.shape[0], ws.stride(0)),
                       tuple(map(_span, (out, a, b, *inputs))),
                       tuple(i for i in tma_inputs if inputs[i] is not None),
                       aliased if same else None, None if out_given else out.dtype,
                       a.get_device())


def launch(key, torch, a, b, out, inputs: tuple, scalars: tuple = ()):
    """The call's result through its plan, or None (no plan, or a per-call fact differs)."""
    try:
        plan = _PLANS.get(key)
    except TypeError:          # an unhashable config or fact
        return None
    if plan is None:
        return None
    return plan.run(torch, a, b, out, inputs, scalars)
