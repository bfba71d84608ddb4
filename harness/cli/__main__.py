"""``python -m harness.cli``: the ``afdb`` command."""

from harness.cli.main import entry

entry()
