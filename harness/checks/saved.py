"""What a Function's backward reads: its saved tensors, worked out from the ctx.

Second order under ``gradient="custom"`` has two possible references (see
``harness.checks.second_order``), and which one is independent depends on what backward
reads. A plain eager call with leaves that require grad gives the Function's ctx (the
``grad_fn`` of its outputs); its ``saved_tensors`` and the tensors stored as attributes of
the ctx are each matched against the call's inputs and outputs (the same tensor, or one with
the same storage, offset, shape and strides: ``x.detach()`` is still the input's data):

* all of them inputs (or nothing saved): backward is a function of the inputs alone, so
  the derivative of the gradient users get is finite differences of ``x -> backward(x)(c)``;
* an output or an intermediate among them: under torch.func its dependence on the inputs
  runs through the custom rule, under finite differences through the true derivative, so
  only eager double backward of the same Function is comparable.

Nothing the user declares is trusted for this: only what the ctx holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness.checks.autodiff_refs import DiffView
from harness.plans.batching import as_tuple
from harness.plans.pytrees import leaves, output_leaves

#: Attributes torch itself may keep on a ctx (never the user's saved state).
TORCH_CTX_ATTRIBUTES = frozenset(
    {"to_save", "saved_for_forward", "non_differentiable", "dirty_tensors", "needs_input_grad"}
)


@dataclass(frozen=True)
class BackwardReads:
    """What the ctx keeps for backward: ``others`` names every saved tensor that is not an
    input (``output 0``, ``an intermediate (saved tensor 2)``, ``ctx.stats``); ``known`` is
    False when the ctx could not be read (no autograd.Function node, or saved tensors freed)."""

    inputs: tuple[str, ...] = ()
    others: tuple[str, ...] = ()
    known: bool = True
    #: Flat indices of the outputs among the saved tensors.
    saved_outputs: tuple[int, ...] = ()

    @property
    def inputs_only(self) -> bool:
        return self.known and not self.others

    def describe(self) -> str:
        if not self.known:
            return "the suite could not read what it saved"
        if not self.others:
            saved = ", ".join(self.inputs) if self.inputs else "nothing"
            return f"it saves only inputs ({saved})"
        return "it reads " + ", ".join(self.others[:3]) + (" ..." if len(self.others) > 3 else "")


def _same_data(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a is b:
        return True
    try:
        return (
            a.device == b.device
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
            and a.storage_offset() == b.storage_offset()
            and a.shape == b.shape
            and a.stride() == b.stride()
        )
    except (RuntimeError, NotImplementedError):  # tensors without storage (subclasses)
        return False


def _match(t: torch.Tensor, named: Sequence[tuple[str, torch.Tensor]]) -> str:
    return next((name for name, other in named if _same_data(t, other)), "")


def backward_reads(view: DiffView) -> BackwardReads:
    """Read the ctx of one eager call of the view's Function (see the module docstring)."""
    entry = view.entry
    inplace = set(entry.caps.inplace_args)
    call: list[Any] = []
    for i, a in enumerate(view.args):
        if isinstance(a, torch.Tensor):
            a = a.detach().clone()
            if i in view.diff:
                a.requires_grad_(True)
        call.append(a)
    args_before = list(call)
    try:
        with torch.enable_grad(), torch.random.fork_rng(devices=[]):
            out = entry.call(*[a.clone() if k in inplace else a for k, a in enumerate(call)])
    except Exception:
        return BackwardReads(known=False)
    outs = [o for o in output_leaves(as_tuple(out)) if isinstance(o, torch.Tensor)]
    node = next((o.grad_fn for o in outs if o.grad_fn is not None), None)
    if not isinstance(node, torch.autograd.function.BackwardCFunction):
        return BackwardReads(known=False)
    try:
        saved = [(f"saved tensor {k}", t) for k, t in enumerate(node.saved_tensors)]
    except RuntimeError:
        return BackwardReads(known=False)
    for attr, value in vars(node).items():
        if attr in TORCH_CTX_ATTRIBUTES:
            continue
        saved += [(f"ctx.{attr}", t) for _, t in leaves(value) if isinstance(t, torch.Tensor)]
    inputs = [
        (f"input {i}", t)
        for i, a in enumerate(args_before)
        for _, t in leaves(a)
        if isinstance(t, torch.Tensor)
    ]
    outputs = [(f"output {j}", o) for j, o in enumerate(outs)]
    found_inputs: list[str] = []
    others: list[str] = []
    saved_outputs: list[int] = []
    for where, t in saved:
        as_output = _match(t, outputs)
        as_input = "" if as_output else _match(t, inputs)
        if as_input:
            if as_input not in found_inputs:
                found_inputs.append(as_input)
        elif as_output:
            others.append(f"the saved {as_output}" + (f" ({where})" if "ctx." in where else ""))
            j = int(as_output.rsplit(" ", 1)[1])
            if j not in saved_outputs:
                saved_outputs.append(j)
        else:
            others.append(f"an intermediate ({where})")
    return BackwardReads(tuple(found_inputs), tuple(others), True, tuple(saved_outputs))


def nondiff_saved_hint(view: DiffView) -> str:
    """For a second-order failure: backward reads outputs that are not differentiable (marked
    with ``mark_non_differentiable``), whose dependence on the inputs double backward cannot
    see ("" when it reads none)."""
    reads = backward_reads(view)
    marked = [
        j
        for j in reads.saved_outputs
        if j not in view.outs
        and isinstance(view.outputs[j], torch.Tensor)
        and (view.outputs[j].is_floating_point() or view.outputs[j].is_complex())
    ]
    if not marked:
        return ""
    names = ", ".join(view.out_name(j) for j in marked)
    return (
        f"backward reads {names}, which the Function marks non-differentiable: double backward "
        "cannot see how they depend on the inputs, so its second order misses those terms; "
        "recompute them from the inputs in backward, or declare double_backward=False "
        "(--no-double-backward)"
    )
