"""The sources wing: where the entries of a run come from, each through one interface.

A source has a ``name`` (the report's ``metadata.source``), ``entries()`` (the entries it
yields), ``options(entries, options)`` (batch sizes that avoid its samples' dims) and
``expectations()`` (its committed known failures, or None):

* ``database.DatabaseSource``: this suite's registry (``"afdb"``) and PyTorch's db
  (``"pytorch"``, adapted in ``pytorch_db``);
* ``target.TargetSource``: a user's ``module:Class`` with its samples (``afdb check``; the
  spec is ``target.TargetSpec``, the modules are loaded by ``imports``);
* ``recording.RecordingSource``: a recording's Functions (``recorded``: one
  ``RecordedEntry`` each, checkable or why not; ``recorded_samples``: the calls as made;
  ``references`` / ``rebuild``: values and classes made again).

Every source's entries are made by ``entries.make_entry`` from a Function, its samples
(``user_samples``) and what was declared for it: the flags of ``afdb check`` or the
``declare`` lines of a project (``declare``, read by ``declare_config``), applied there and
nowhere else. ``batch_sizes`` and ``select`` serve every source.

May import ``autograd_function_db``, ``reports`` / ``repro``, ``engine`` and below (the engine
builds a source's samples and probes them); nothing here runs a case or writes a report.
Importing the package loads nothing: import the module you need.
"""
