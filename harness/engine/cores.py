"""How many workers: ``-n`` as pytest-xdist reads it, the physical cores behind ``auto``, and
the cap that keeps workers from only competing for the CPUs.

Imports no torch (nor anything that does): ``-n`` can be read and refused before a run loads it.
"""

from __future__ import annotations

import os

from harness.core.errors import UsageError


def physical_cores() -> int:
    """Physical cores this process may use (hyper-threads counted once), at least 1.

    pytest-xdist's ``-n auto`` means the physical cores; read them from
    /proc/cpuinfo (core id per physical id) where it exists, else the usable CPUs.
    """
    usable = usable_cpus()
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return usable
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cores = count_physical_cores(text, allowed)
    return max(1, min(cores, usable)) if cores else usable


def count_physical_cores(cpuinfo: str, allowed: set[int] | None = None) -> int:
    """Distinct (physical id, core id) pairs among the ``allowed`` processors of a
    /proc/cpuinfo text; 0 when it does not say."""
    cpu_core: dict[int, tuple[str, str]] = {}
    processor, physical = -1, "0"
    for line in cpuinfo.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "processor" and value.isdigit():
            processor, physical = int(value), "0"
        elif key == "physical id":
            physical = value
        elif key == "core id" and processor >= 0:
            cpu_core[processor] = (physical, value)
    return len({core for cpu, core in cpu_core.items() if allowed is None or cpu in allowed})


def usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def parse_workers(text: str | None) -> int | None:
    """``-n`` as pytest-xdist reads it: None (not given), 0 (in this process), N, or auto."""
    if text is None:
        return None
    text = str(text).strip()
    if text == "auto":
        return physical_cores()
    if not text.isdigit():
        raise UsageError(
            f"-n must be a number of workers (0: in this process) or auto; got {text!r}"
        )
    return int(text)


#: Workers beyond this many per usable CPU only compete for the cores (and cost memory).
WORKERS_PER_CPU = 2


def reduce_workers(requested: int, cases: int) -> tuple[int, str]:
    """The workers to start for ``cases`` cases, and a one-line note when fewer than asked."""
    cap = WORKERS_PER_CPU * usable_cpus()
    n = max(1, min(requested, cases, cap))
    if n == requested:
        return n, ""
    if requested > cap and cap <= cases:
        why = f"{WORKERS_PER_CPU} per usable CPU, {usable_cpus()} here; more would only compete for them"
    else:
        why = f"there are only {cases} cases to run"
    return n, f"-n {requested}: using {n} worker{'s' if n != 1 else ''} ({why})"
