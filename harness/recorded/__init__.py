"""Checking the Functions a recording saw (issue 28, "Check"): ``afdb check --recorded``
and ``pytest --afdb``.

A recording (``harness.recording``) holds, per Function class, up to a few of the calls a
program made. Each recorded Function becomes an entry named by its ``module:QualName``
target whose samples are those calls (the unseeded-samples path of ``harness.sources.entries``:
distinct slices by perturbation, batch sizes that avoid every recorded dim), checked as
``afdb check`` checks one Function. What a class cannot say (a straight-through gradient,
arguments never differentiated) comes from declarations (``declare``).

* ``declare``: ``TARGET key=value ...`` lines (``--declare``, the ``afdb_declare`` ini
  option), parsed strictly.
* ``entries``: the recording's Functions as entries, or the reason one cannot be checked
  (never called, not recordable, not importable here, only called inside another).
* ``verdicts``: one line per Function after the run, the summary sentence, and the note
  on a failing gradient no recorded call needs.

Imports: ``harness.sources`` and below (``harness.recording`` for the data).
"""
