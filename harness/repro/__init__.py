"""Standalone reproducers: the text of a Python script that replays one case.

Owns two scripts. The minimal plain-torch script ``afdb repro`` writes by default, about 30
lines to paste into a bug report: ``minimal`` puts it together (and writes the vmap body),
from the facts learned from the case (``minimal_facts``), the header and the sample's draw
(``minimal_source``), the bodies of the autodiff checks (``minimal_autodiff``) and of the
composites (``minimal_composite``). The full self-checking script behind ``--full``:
``script`` puts it together from the code it inlines, kept as strings: the frame every
script has (``script_data``) and one body (``script_vmap``, ``script_autodiff`` with
``script_eager``, ``script_opcheck``). Shared by both: ``literal`` (the only way data enters
a script's text) and ``subcheck`` (a failing sub-check named in a case's message).

It writes text; it never runs a case (``minimal_facts`` draws the case's sample and calls
the Function once, to learn its outputs' shapes and the finite-difference step). Inside
the wing imports run one way: ``minimal_facts`` <- ``minimal_source`` <-
``minimal_autodiff`` <- ``minimal_composite`` <- ``minimal``, with ``literal`` and
``subcheck`` below them all; the ``script_*`` bodies import nothing.

May import: ``harness.engine.cases`` (the case to describe), ``harness.checks`` and
``harness.plans`` (the suite's seeds, steps and differentiable view), ``harness.core``;
never ``harness.reports`` beside it nor anything above (the pyproject layers contract).
A script written for a recorded Function imports ``harness.recorded`` itself, as text.
"""
