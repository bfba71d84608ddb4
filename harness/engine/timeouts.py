"""A Function that hangs costs one timeout per staticmethod and sample, not one per case.

A backward that hangs hangs in every case that calls it: forty cases in each of a dozen
checks at a 300 s limit are days of waiting for one bug. Two rules stop it:

* when the watchdog saw which of the Function's staticmethods was running as the time ran
  out (``harness.engine.hangs``), every later case on that sample of a check that calls it
  (``harness.checks.catalogue.staticmethods_called``) gets ``timeout`` with "not run:
  `backward` did not return in 20 s on sample 0 (case ...)" at once; checks that never
  call it still run;
* whatever hung, once two cases of an (entry, check) have timed out, its remaining cases
  get ``timeout`` with "not run: this check timed out twice".

Both hold in every mode:

* in this process (``run_entries``, the pytest plugin's items): a ``TimeoutLedger`` in memory;
* in worker processes (the fork pool, pytest-xdist): the ledger is also a file in the run's
  temporary folder, appended by whichever process saw the timeout (the worker whose case
  timed out, or the controller that saw a worker killed by the native-hang watchdog), and
  read by every worker before each case and by the fork pool's controller before it
  sends a batch.

This module imports no torch: pytest-xdist's controller (which never imports torch)
calls ``note_crashed_timeout``.
"""

from __future__ import annotations

import contextlib
import json
import os

from harness.core.results import CRASH, TIMEOUT, CaseResult

#: Timeouts in one (entry, check) after which its other cases are not run.
TIMEOUTS_PER_CHECK = 2
#: Crashes (a worker the Function killed) in one (entry, check) after which its other cases
#: are not run: each would cost a fresh worker (and, for a Function made again by
#: re-running tests, that re-run) to learn what two already showed.
CRASHES_PER_CHECK = 2
NOT_RUN = "not run: this check timed out twice"
#: How every case that was not run because of an earlier timeout begins.
NOT_RUN_PREFIX = "not run: "
#: The ledger's file in a run's temporary folder.
LEDGER_FILE = "timeouts.jsonl"


class TimeoutLedger:
    """The timed-out cases of a run, by (entry, check)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.seen: dict[tuple[str, str], list[str]] = {}
        #: By (entry, sample): the staticmethods that did not return, each with the case id
        #: and the limit (the first timeout in it).
        self.hung: dict[tuple[str, int | None], dict[str, tuple[str, float]]] = {}
        #: By (entry, check): the cases whose worker the Function killed.
        self.crashed: dict[tuple[str, str], list[str]] = {}
        self._read = 0  # bytes of the file already read

    def attach(self, folder: str) -> None:
        """Share the ledger through a file in ``folder`` (before workers are started)."""
        self.path = os.path.join(folder, LEDGER_FILE)

    def _add(self, entry: str, check: str, case_id: str) -> bool:
        ids = self.seen.setdefault((entry, check), [])
        if case_id in ids:
            return False
        ids.append(case_id)
        return True

    def _add_hang(
        self, entry: str, sample: int | None, name: str, case_id: str, seconds: float
    ) -> bool:
        hung = self.hung.setdefault((entry, sample), {})
        if name in hung:
            return False
        hung[name] = (case_id, seconds)
        return True

    def note(self, result: CaseResult, hung_in: str | None = None, seconds: float = 0.0) -> None:
        """Count ``result`` if it is a timeout (or a crash) of a case that ran; ``hung_in``:
        the staticmethod that was running when its time ran out (``seconds``: the limit)."""
        if result.status == CRASH and not result.message.startswith(NOT_RUN_PREFIX):
            if self._add_crash(result.entry, result.check, result.id) and self.path:
                append_line(self.path, crash_line(result.entry, result.check, result.id))
            return
        if result.status != TIMEOUT or result.message.startswith(NOT_RUN_PREFIX):
            return
        if self._add(result.entry, result.check, result.id) and self.path:
            append_line(self.path, [result.entry, result.check, result.id])
        added = bool(hung_in) and self._add_hang(
            result.entry, result.sample, str(hung_in), result.id, seconds
        )
        if added and self.path:
            append_line(
                self.path,
                {
                    "hung": hung_in,
                    "entry": result.entry,
                    "sample": result.sample,
                    "case": result.id,
                    "seconds": seconds,
                },
            )

    def _add_crash(self, entry: str, check: str, case_id: str) -> bool:
        ids = self.crashed.setdefault((entry, check), [])
        if case_id in ids:
            return False
        ids.append(case_id)
        return True

    def crashed_out(self, entry: str, check: str) -> list[str]:
        """The crashed case ids of (entry, check) once there are enough to stop ([] before)."""
        ids = self.crashed.get((entry, check), [])
        return ids if len(ids) >= CRASHES_PER_CHECK else []

    def _refresh(self) -> None:
        if not self.path:
            return
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return
        if size <= self._read:
            return
        with contextlib.suppress(OSError), open(self.path, "rb") as f:
            f.seek(self._read)
            data = f.read(size - self._read)
            end = data.rfind(b"\n") + 1  # whole lines only: a writer may be half way
            self._read += end
            for line in data[:end].splitlines():
                with contextlib.suppress(ValueError, TypeError, KeyError):
                    item = json.loads(line)
                    if isinstance(item, dict) and "crash" in item:
                        self._add_crash(str(item["entry"]), str(item["check"]), str(item["crash"]))
                        continue
                    if isinstance(item, dict):
                        sample = item["sample"]
                        self._add_hang(
                            str(item["entry"]),
                            None if sample is None else int(sample),
                            str(item["hung"]),
                            str(item["case"]),
                            float(item["seconds"]),
                        )
                        continue
                    entry, check, case_id = item
                    self._add(str(entry), str(check), str(case_id))

    def exhausted(self, entry: str, check: str, *, refresh: bool = True) -> list[str]:
        """The timed-out case ids of (entry, check) once there are enough to stop ([] before);
        ``refresh=False``: the file was just read (by ``hung_in``)."""
        if refresh:
            self._refresh()
        ids = self.seen.get((entry, check), [])
        return ids if len(ids) >= TIMEOUTS_PER_CHECK else []

    def hung_in(self, entry: str, sample: int | None) -> dict[str, tuple[str, float]]:
        """The staticmethods that did not return on (entry, sample): name -> (case id, limit)."""
        self._refresh()
        return self.hung.get((entry, sample), {})


def hung_message(name: str, sample: int | None, case_id: str, seconds: float) -> str:
    where = f" on sample {sample}" if sample is not None else ""
    return (
        f"{NOT_RUN_PREFIX}`{name}` did not return in {seconds:g} s{where} (case {case_id}), "
        f"so this case, which calls `{name}`{where}, was not run: it would most likely hang "
        "as well, for the whole limit"
    )


def crash_line(entry: str, check: str, case_id: str) -> dict[str, str]:
    return {"crash": case_id, "entry": entry, "check": check}


def crashed_message(ids: list[str]) -> str:
    return (
        f"{NOT_RUN_PREFIX}this check killed its process twice ({ids[0]} and {ids[1]}), so its "
        "other cases were not run: they would most likely kill it as well"
    )


def not_run_message(ids: list[str]) -> str:
    return (
        f"{NOT_RUN} ({ids[0]} and {ids[1]}), so its other cases were not run: they would "
        "most likely hang as well, each for the whole limit"
    )


def append_line(path: str, item: object) -> None:
    """One JSON line appended whole (O_APPEND: writers in several processes never mix)."""
    data = (json.dumps(item) + "\n").encode()
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def note_crashed_timeout(folder: str, case_id: str) -> None:
    """pytest-xdist's controller: the worker running ``case_id`` died; if its fault log says
    the native-hang watchdog killed it, the case timed out, else it crashed: count it in the
    ledger."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not (name.startswith("running-") and name.endswith(".txt")):
            continue
        with contextlib.suppress(OSError):
            with open(os.path.join(folder, name)) as f:
                if f.read() != case_id:
                    continue
            pid = name[len("running-") : -len(".txt")]
            entry, _, rest = case_id.partition("/")
            check = rest.split("/")[0]
            with open(os.path.join(folder, f"faults-{pid}.txt"), errors="replace") as g:
                if "Timeout (" not in g.read():  # the Function killed it: a crash
                    append_line(
                        os.path.join(folder, LEDGER_FILE), crash_line(entry, check, case_id)
                    )
                    return
            append_line(os.path.join(folder, LEDGER_FILE), [entry, check, case_id])
            return


__all__ = [
    "CRASHES_PER_CHECK",
    "NOT_RUN",
    "NOT_RUN_PREFIX",
    "TIMEOUTS_PER_CHECK",
    "TimeoutLedger",
    "hung_message",
    "note_crashed_timeout",
]
