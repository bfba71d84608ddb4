"""One attribute of a torch module replaced by the suite's own function, under guards.

The shims (``dynamo_shim``, ``grads_shim``) each route one torch function around a
first-use import. What makes such a replacement safe is the same for both: it is installed
only over a function whose parameters are the ones it was written for, never where it was
forbidden (an environment variable, or ``forbid()`` by anything that compiles, for the rest
of the process), and it can be taken out again, putting torch's own function back.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any


class GuardedPatch:
    """``owner().<attribute>`` replaced by ``replacement`` while installed (see the module
    docstring); ``original`` is torch's function then, for the replacement to call."""

    def __init__(
        self,
        owner: Callable[[], Any],
        attribute: str,
        replacement: Callable[..., Any],
        parameters: tuple[str, ...],
        env_var: str,
        precondition: Callable[[], bool] = lambda: True,
    ) -> None:
        self.owner = owner
        self.attribute = attribute
        self.replacement = replacement
        self.parameters = parameters
        self.env_var = env_var
        self.precondition = precondition
        self.original: Callable[..., Any] | None = None
        self.off = os.environ.get(env_var, "1") == "0"

    def compatible(self) -> bool:
        """torch's function (or the one ``install`` replaced) has the expected parameters,
        and whatever else the replacement relies on is there."""
        fn = (
            self.original
            if self.original is not None
            else getattr(self.owner(), self.attribute, None)
        )
        if fn is None or not self.precondition():
            return False
        try:
            names = tuple(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            return False
        return names == self.parameters

    def installed(self) -> bool:
        return (
            self.original is not None and getattr(self.owner(), self.attribute) is self.replacement
        )

    def install(self) -> bool:
        """Put the replacement in place; idempotent. False where it is forbidden or torch's
        function is not the one it was written for."""
        if self.off:
            return False
        if self.original is not None:  # installed (every case asks: a look at an attribute)
            return True
        if not self.compatible():
            return False
        owner = self.owner()
        self.original = getattr(owner, self.attribute)
        setattr(owner, self.attribute, self.replacement)
        return True

    def uninstall(self) -> None:
        """Put torch's own function back (``install`` may add the replacement again)."""
        if self.original is None:
            return
        owner = self.owner()
        if getattr(owner, self.attribute) is self.replacement:
            setattr(owner, self.attribute, self.original)
        self.original = None

    def forbid(self) -> None:
        """Never install the replacement again in this process."""
        self.off = True
        self.uninstall()


__all__ = ["GuardedPatch"]
