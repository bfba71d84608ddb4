"""The two refusals of arguments as data, shared by ``values`` and ``kinds``.

``NotRecordable``: a value that cannot be kept as data (while recording); ``BadNode``: a
node that is not what the recording modules write (while reading one back). Both modules
raise them, so they live below both: ``values`` builds on ``kinds``, never the reverse.
"""

from __future__ import annotations


class NotRecordable(Exception):
    """An argument that cannot be kept as data; the message is the reason."""


class BadNode(Exception):
    """A node that is not what ``values`` or ``kinds`` writes; the message names the problem."""


def argument_at(path: str) -> str:
    """How a refusal names the argument at ``path`` (``argument args[0]['x']``)."""
    return f"argument {path}"
