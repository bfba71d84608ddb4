"""The session wing: one run of some entries, from settings to printed summary and reports.

What every running command and ``pytest --afdb`` share (coverage.py's ``control.py`` in
spirit: one facade over the wings below):

* ``settings``: a run's settings (``Settings``: ``afdb check``'s defaults, for callers with
  no command line) and the ``Options`` they make;
* ``execute``: run the cases in-process or in workers, apply the expectations, write the
  reports, print the progress and the summary; the exit status;
* ``outputs``: the report files (checked before a run starts) and the expectations applied;
* ``selection``: case id prefixes, ``--shard``, ``--maxfail``;
* ``progress``: the progress lines and the summary;
* ``recorded``: checking a recording, "run these entries" of a ``RecordingSource`` plus the
  verdict line of each Function (``afdb check --recorded``, ``afdb record --check``,
  ``harness.check_recorded``, ``pytest --afdb``).

May import ``recorded``, ``api``, ``expectations``, ``sources`` and every wing below; never
``cli``, ``certify``, ``migrate`` or the pytest wing, which call it. Importing a module of this
wing loads no torch (``afdb --help`` stays light); its functions import what they run.
"""
