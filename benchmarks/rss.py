"""Run ``afdb ARGS`` (or ``python ARGS``) in this process and report its cost on stderr.

    python -m benchmarks.rss --afdb run -q -n 2
    python -m benchmarks.rss --python -c "import torch, harness"

The last stderr line is JSON: exit status, CPU seconds of the process and its
children, the peak RSS of the process and of its largest waited-for descendant.
"""

from __future__ import annotations

import json
import resource
import runpy
import sys


def _report(rc: int) -> None:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    info = {
        "rc": rc,
        "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
        "rss_mb": me.ru_maxrss / 1024,
        "child_rss_mb": kids.ru_maxrss / 1024,
    }
    sys.stdout.flush()
    print(json.dumps(info), file=sys.stderr)


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    rc = 0
    if mode == "--afdb":
        import io
        from contextlib import redirect_stdout

        from harness.cli.main import main as afdb

        with redirect_stdout(io.StringIO()):
            rc = afdb(args)
    else:
        sys.argv = ["python", *args[1:]]
        if args[0] == "-c":
            exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
        else:
            runpy.run_path(args[0], run_name="__main__")
    _report(rc)
    if mode == "--afdb":  # end as the ``afdb`` command does (harness.cli.main.entry)
        import atexit
        import os

        sys.stderr.flush()
        atexit._run_exitfuncs()
        os._exit(rc)


if __name__ == "__main__":
    main()
