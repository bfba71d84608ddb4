"""Standalone reproducers: the text of a Python script that replays one case.

Owns: the minimal plain-torch script ``afdb repro`` writes by default (``minimal``: about
30 lines to paste into a bug report), the full self-checking script behind ``--full``
(``script``) and the code pieces that one inlines (``script_parts``). It writes text; it
never runs a case (``minimal`` draws the case's sample and calls the Function once, to
learn its outputs' shapes and the finite-difference step).

May import: ``harness.engine.cases`` (the case to describe), ``harness.checks`` and
``harness.plans`` (the suite's seeds, steps and differentiable view), ``harness.core``.
"""
