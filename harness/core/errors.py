"""The exceptions every layer raises, in one leaf module so no layer imports another for them.

* ``UsageError``: bad input from the user (a flag, a target, a file): one line naming what
  is wrong and how to fix it. The CLI prints it and exits 2; the Python API raises it.
* ``CaseTimeout``: a case ran past its time limit (raised inside the case by the timer or
  the watchdog). A ``BaseException``, so that neither the Function's ``except Exception``
  nor a check's (which turns a Function's exception into a finding) takes it for an error.
"""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input from the user: the message is one line naming what is wrong and how to fix it."""


class CaseTimeout(BaseException):
    """The case ran past its time limit."""
