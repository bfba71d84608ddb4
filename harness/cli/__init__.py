"""The ``afdb`` command line: flags in, a session run, an exit status out.

One module per command, each adding its parser through ``add_parsers`` (``main`` lists them
in ``COMMAND_MODULES``): ``run`` (``run``, ``list``), ``check`` (one user target),
``check_recorded`` (``check --recorded``, ``afdb record --check``, ``harness.check_recorded``),
``repro`` (``afdb repro``, with ``repro_settings``: what it reads from a report),
``report`` (``report``, ``diff``, ``matrix``), ``merge``, ``certify``, ``record``
(``record``, ``recording``), ``migrate``, ``watch`` (``check --watch``). Shared pieces:
``common`` (the common options), ``selection`` (``--last-failed`` and the selection
flags), ``target_options`` (a target's capability flags and the ``TargetSpec`` they make).

Running a run is the session wing's (``harness.session``); the CLI only turns flags into
its settings. May import every wing but the pytest wing; only ``python -m harness.cli``,
the ``afdb`` script and ``harness.check_recorded`` import it.
"""
