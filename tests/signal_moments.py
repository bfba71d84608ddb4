"""``python tests/signal_moments.py MOMENT SIGNAL afdb-args...``: run ``afdb`` and send this
process SIGNAL at one exact moment, deterministically (no sleeps):

* ``import:MODULE``: as MODULE's import starts (``import:torch``: during the torch import);
* ``fork``: in the controller, right after it forks a worker;
* ``popen``: right after the pytest-xdist pool is started;
* ``mkdtemp``: right after a temporary folder is made (before anything owns it);
* ``mkstemp``: right after a temporary file is made (a report being written).
"""

from __future__ import annotations

import importlib.abc
import os
import signal
import subprocess
import sys
import tempfile


def _send() -> None:
    os.kill(os.getpid(), SIGNAL)


def _after(owner: object, name: str, parent_only: bool = False) -> None:
    real = getattr(owner, name)

    def wrapped(*args, **kwargs):
        out = real(*args, **kwargs)
        if not parent_only or out:
            _send()
        return out

    setattr(owner, name, wrapped)


class _OnImport(importlib.abc.MetaPathFinder):
    def __init__(self, module: str) -> None:
        self.module = module
        self.fired = False

    def find_spec(self, name, path, target=None):
        if name == self.module and not self.fired:
            self.fired = True
            _send()
        return None


if __name__ == "__main__":
    moment, signame, *afdb_args = sys.argv[1:]
    SIGNAL = getattr(signal, signame)
    if moment.startswith("import:"):
        sys.meta_path.insert(0, _OnImport(moment.split(":", 1)[1]))
    elif moment == "fork":
        _after(os, "fork", parent_only=True)
    elif moment == "popen":
        real_init = subprocess.Popen.__init__

        def init(self, *args, **kwargs):
            real_init(self, *args, **kwargs)
            _send()

        subprocess.Popen.__init__ = init
    elif moment in ("mkdtemp", "mkstemp"):
        _after(tempfile, moment)
    else:
        raise SystemExit(f"unknown moment {moment!r}")
    sys.argv = ["afdb", *afdb_args]
    from harness.cli.main import entry

    entry()
