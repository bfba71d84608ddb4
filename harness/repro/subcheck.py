"""A case's failing sub-check, as ``afdb repro --sub-check`` names it, for the minimal script.

A case compares each differentiable input alone and all together, each output alone and
all together, and non-contiguous inputs; its message lists the ``failing sub-checks``. The
minimal script makes the failing one's call (``harness.repro.minimal``), so a bug only
"input 1 alone" sees reproduces.
"""

from __future__ import annotations

import re
from typing import Any

from harness.core.errors import UsageError


class SubCheck:
    """A case's sub-check as its message names it: ``input 1 alone, all outputs``,
    ``all inputs, output 0 alone``, ``non-contiguous inputs and cotangents``, with
    `` (torch.autograd.grad)`` when only the eager way failed."""

    def __init__(self, text: str) -> None:
        self.text = text.strip()
        rest = self.text
        self.eager = rest.endswith("(torch.autograd.grad)")
        rest = rest.removesuffix("(torch.autograd.grad)").strip()
        self.strided = rest.startswith("non-contiguous")
        self.input: int | None = None
        self.output: int | None = None
        for part in (p.strip() for p in rest.split(",")):
            m = re.fullmatch(r"(input|output) (\d+) alone", part)
            if m:
                setattr(self, m.group(1), int(m.group(2)))
            elif part not in ("all inputs", "all outputs") and not self.strided:
                raise UsageError(
                    f"--sub-check {text!r}: not a sub-check (e.g. 'input 1 alone, all outputs', "
                    "'non-contiguous inputs and cotangents')"
                )

    def restrict(self, facts: Any) -> None:
        """Narrow ``facts`` (``minimal_facts.CaseFacts``) to the sub-check's input and output."""
        if self.input is not None:
            if self.input not in facts.diff:
                raise UsageError(
                    f"--sub-check {self.text!r}: input {self.input} is not differentiable"
                )
            facts.diff = (self.input,)
        if self.output is not None:
            if self.output not in facts.outs:
                raise UsageError(
                    f"--sub-check {self.text!r}: output {self.output} is not differentiable"
                )
            facts.outs = (self.output,)
