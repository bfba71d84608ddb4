"""What a recorded check says after its run: one verdict per Function, hints, reproducers.

A recording is a source (``harness.sources.recording``); checking it is a session
(``harness.session.recorded``). This wing reads the run's results against the recording:

* ``verdicts``: one line per Function, the summary sentence, the report's
  ``metadata.recorded``, and the note on a failing gradient no recorded call needs;
* ``hints``: the declaration a failure may ask for (``nondiff-args``, a surrogate gradient);
* ``repro_lines`` / ``repro_call``: the ``reproduce:`` line of a recorded case, with only its
  Function's declaration, or the ``pytest --afdb NODEID`` line for a class made in a test.

May import ``api``, ``expectations``, ``sources`` and below; the session and the CLI call it.
"""
