"""The samples' plain call in a fresh interpreter, for a process that cannot fork.

``harness.engine.probe`` calls each sample once in a forked child, so a Function that kills
its process on a plain call kills the child only. A process that is not safe to fork (a
thread pool a child cannot do without: ``harness.engine.fork_safety``) used to make those
calls itself: one such Function ended the run. Where the entry comes from a target spec
(``afdb check TARGET``), a fresh interpreter makes it again from the spec and probes there
(``python -m harness.sources.probe_child``, the spec and options on stdin, the answer on
stdout); a crash, a hang or any other failure of that interpreter is no answer, as a forked
child's is. A Function passed as an object (``harness.check``) has no spec: it is probed in
this process, and one line says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

#: The fresh interpreter's limit beyond the cases' own (the torch import, the samples).
STARTUP_S = 120.0


def probe_in_fresh_interpreter(spec: Any, options: Any) -> Any:
    """The ``Refusal`` a fresh interpreter's probe found (None: none, or no answer)."""
    from harness.core.paths import SUITE_ROOT
    from harness.engine.probe import Refusal

    request = json.dumps({"spec": spec.to_dict(), "options": options.to_dict()})
    env = dict(os.environ)
    paths = [str(SUITE_ROOT), *(os.path.abspath(p) for p in sys.path if p and os.path.isdir(p))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    limit = STARTUP_S + (options.timeout_s or 60.0) * 2
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "harness.sources.probe_child"],
            input=request,
            capture_output=True,
            text=True,
            timeout=limit,
            env=env,
            cwd=os.getcwd(),
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    lines = proc.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return Refusal(**found) if isinstance(found, dict) else None
