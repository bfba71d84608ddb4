"""The ``afdb`` command line: one module per command (``main`` parses and runs ``run``,
``list``; ``check`` / ``repro``; ``report`` / ``diff``; ``merge``; ``certify``), with what
``afdb repro --report`` reads from a report (``repro_settings``).

The top of the layers: may import any wing; nothing imports it but ``python -m harness.cli``.
"""
