"""The pytest wing: everything the suite does inside pytest.

* ``conformance``: ``conformance_tests`` / ``database_tests``, a user's test module's cases
  as pytest items (documented as ``from harness.pytest_plugin import conformance_tests``);
* ``items``: the suite of cases behind those items and their pytest outcomes;
* ``workers``: the plugin the engine's pytest-xdist workers load by name (``-p
  harness.plugin.workers``), which makes one item per case of the run's config file;
* ``session``: ``pytest --afdb``, the session's recording checked at its end through
  ``harness.session.recorded`` (loaded by the entry point only with the flag).

The entry point pytest loads in every run is the light top-level ``afdb_pytest_plugin``;
it imports this wing only when a flag or a test module asks for it.

May import every wing below it (``session``, ``recorded``, ``api``, ``sources``, the engine
and down); never the CLI (``harness.cli``), and nothing below imports it (the engine names
``workers`` as a plugin string): pyproject's import-linter contracts keep both.
"""
