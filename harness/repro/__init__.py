"""Standalone reproducers: the text of a Python script that replays one case.

Owns: script generation (``script``) and the code pieces a script inlines
(``script_parts``). It writes text; it never runs a case.

May import: ``harness.engine.cases`` (the case to describe), ``harness.core``.
"""
