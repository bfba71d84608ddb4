"""What ``afdb certify --verify`` may load: only what the user names on the command line.

A certificate is data from elsewhere. Its backend can name code (a subclass as
``module:Class`` or ``path/file.py:Class``, modules to ``--import`` first, a compile
backend that only a package registers), and its digest proves nothing about who made it
(anyone can recompute it). So ``--verify`` never imports a name it read from the
certificate: ``verified_backend`` builds the backend to re-run from the user's own
``--subclass``, ``--compile``, ``--device``, ``--mode`` and ``--import``, refusing (one
line, exit 2) when the certificate's backend needs something the user did not name,
and when what the user named is not what the certificate records.

Needing no name: a device torch knows without an import (cpu, cuda, ...) and a
torch.compile backend that torch itself registers (eager, aot_eager, inductor, ...);
the mode of a compile backend is a fixed word, checked against the known modes.

The expectations files a certificate's scope records are read, never run; only files
inside the suite (a relative path that stays there) are taken from the certificate,
any other needs ``--expectations FILE`` (``recorded_expectations``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from harness.certify.backends import COMPILE, DEVICE, SUBCLASS, Backend, BackendError
from harness.core.errors import UsageError
from harness.core.textsafe import visible
from harness.sources.imports import same_spec

#: How long a name read from a certificate may be in a message.
_SHOWN = 200


def shown(text: Any) -> str:
    """A name read from a certificate, fit for one line (escaped and clipped)."""
    s = visible(str(text), keep_newlines=False)
    return s if len(s) <= _SHOWN else s[:_SHOWN] + "..."


def torch_compile_backend(name: str) -> bool:
    """Whether torch itself registers the compile backend ``name`` (nothing to import:
    not a backend of an installed package's entry point, nor one a module registered)."""
    from torch._dynamo.backends import registry

    registry._lazy_import()  # torch's own backend modules; entry points are only listed
    fn = registry._COMPILER_FNS.get(name)
    module = getattr(fn, "__module__", "") or ""
    return fn is not None and (module == "torch" or module.startswith("torch."))


def _same_device(named: str, recorded: str) -> bool:
    import torch

    if named == recorded:
        return True
    try:
        return torch.device(named) == torch.device(recorded)
    except (RuntimeError, TypeError, ValueError):
        return False


def _named(device: str | None, subclass: str | None, compile: str | None) -> tuple[str, str]:
    given = [
        (kind, name)
        for kind, name in ((DEVICE, device), (SUBCLASS, subclass), (COMPILE, compile))
        if name
    ]
    if len(given) > 1:
        flags = ", ".join(f"--{k}" for k, _ in given)
        raise BackendError(
            f"with --verify, name at most one backend (--device, --subclass or --compile; got {flags})"
        )
    return given[0] if given else ("", "")


def verified_backend(
    recorded: Backend,
    *,
    device: str | None = None,
    subclass: str | None = None,
    compile: str | None = None,
    mode: str | None = None,
    imports: Sequence[str] = (),
) -> Backend:
    """The backend to re-run a certificate on, built from what the user named; or
    BackendError (one line) if the certificate's backend needs something unnamed or
    differs from what was named. Nothing is imported here."""
    kind, name = _named(device, subclass, compile)
    what = _describe(recorded)
    if kind and kind != recorded.kind:
        raise BackendError(
            f"this certificate's backend is {what}, but you named --{kind} {shown(name)}; "
            "verify a certificate on the backend it records"
        )
    options: dict[str, Any] = {}
    if recorded.kind == SUBCLASS:
        if not name:
            raise BackendError(
                f"this certificate's backend is the subclass {shown(recorded.name)}; to verify "
                "it, name it yourself with --subclass, after reading it"
            )
        if not same_spec(name, recorded.name):
            raise BackendError(
                f"--subclass {shown(name)} is not the certificate's backend, the subclass "
                f"{shown(recorded.name)}"
            )
        chosen = name
    elif recorded.kind == COMPILE:
        if name and name != recorded.name:
            raise BackendError(
                f"--compile {shown(name)} is not the certificate's backend, the torch.compile "
                f"backend {shown(recorded.name)}"
            )
        if not name and not torch_compile_backend(recorded.name):
            raise BackendError(
                f"this certificate's backend is the torch.compile backend "
                f"{shown(recorded.name)}, which torch does not register itself; to verify it, "
                "name it yourself with --compile (and --import the module that registers it), "
                "after reading it"
            )
        recorded_mode = recorded.options.get("mode")
        if mode is not None and mode != recorded_mode:
            raise BackendError(
                f"--mode {shown(mode)} is not the certificate's (mode "
                f"{shown(recorded_mode) if recorded_mode else 'not set'})"
            )
        if recorded_mode is not None:
            options["mode"] = recorded_mode  # a fixed word, checked by Backend.validate
        chosen = recorded.name
    else:
        if recorded.kind != DEVICE:
            raise BackendError(f"unknown backend kind {shown(recorded.kind)} in the certificate")
        if name and not _same_device(name, recorded.name):
            raise BackendError(
                f"--device {shown(name)} is not the certificate's backend, the device "
                f"{shown(recorded.name)}"
            )
        chosen = name or recorded.name
    if mode is not None and recorded.kind != COMPILE:
        raise BackendError(f"--mode goes with a compile backend; this certificate's is {what}")
    unnamed = [m for m in recorded.imports if m not in imports]
    if unnamed:
        raise BackendError(
            f"this certificate's backend imports {shown(unnamed[0])} first; to verify it, "
            "name it yourself with --import, after reading it"
        )
    extra = [m for m in imports if m not in recorded.imports]
    if extra:
        raise BackendError(
            f"--import {shown(extra[0])} is not among the certificate's imports "
            f"({', '.join(shown(m) for m in recorded.imports) or 'none'})"
        )
    return Backend(recorded.kind, chosen, options, tuple(recorded.imports))


def _describe(backend: Backend) -> str:
    label = {DEVICE: "the device", SUBCLASS: "the subclass", COMPILE: "the torch.compile backend"}
    return f"{label.get(backend.kind, shown(backend.kind))} {shown(backend.name)}"


def recorded_expectations(recorded: str, root: Any) -> list[str]:
    """The expectations files a certificate's scope names (``a + b``), as paths under the
    suite's ``root``; UsageError for a path that leaves it (absolute, or through ``..``):
    such a file is the certifier's, and the user gives it with --expectations."""
    paths = []
    base = os.path.realpath(str(root))
    for part in str(recorded).split(" + "):
        full = os.path.realpath(os.path.join(base, part))
        if os.path.isabs(part) or not full.startswith(base + os.sep):
            raise UsageError(
                f"the certificate was made with the expectations {shown(part)}, which is not "
                "a file of the suite; give the file with --expectations, after reading it"
            )
        paths.append(full)
    return paths


__all__ = ["recorded_expectations", "shown", "torch_compile_backend", "verified_backend"]
