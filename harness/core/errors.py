"""The exceptions every layer raises, in one leaf module so no layer imports another for them.

* ``UsageError``: bad input from the user (a flag, a target, a file): one line naming what
  is wrong and how to fix it. The CLI prints it and exits 2; the Python API raises it.
* ``CaseTimeout``: a case ran past its time limit (raised inside the case by the timer or
  the watchdog). A ``BaseException``, so that neither the Function's ``except Exception``
  nor a check's (which turns a Function's exception into a finding) takes it for an error.
* ``RunStopped``: a run ends early on purpose (``--maxfail``): the cases done so far are
  the run's, the rest do not run.
* ``FunctionRaised``: the Function (or torch on its behalf) raised inside a named sub-check
  of a check; it carries the sub-check's label and the exception itself, and messages
  describe the exception itself, never this wrapper.
"""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input from the user: the message is one line naming what is wrong and how to fix it."""


class CliError(UsageError):
    """Bad input to a command's settings (the CLI's flags, ``pytest --afdb``'s options)."""


class CaseTimeout(BaseException):
    """The case ran past its time limit."""


class FunctionRaised(Exception):
    """The Function (or torch on its behalf) raised ``original`` inside the sub-check ``label``."""

    def __init__(self, label: str, original: BaseException) -> None:
        super().__init__(f"{label}: {type(original).__name__}: {original}")
        self.label = label
        self.original = original


class RunStopped(Exception):
    """The run stops here on purpose (``-x`` / ``--maxfail N``); the message says why."""
