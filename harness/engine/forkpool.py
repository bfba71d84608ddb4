"""Worker processes forked from this one after torch and the harness are imported.

Why fork: a fresh interpreter pays the torch import (about 2 s) again in every
worker, and every pytest-xdist worker enumerates every case and draws every
sample before it runs its first one. A forked worker inherits the imports, the
enumerated cases and the drawn samples for free, so ``afdb check`` starts its
cases within milliseconds and ``afdb run -n 2`` spends its cores on the cases.

Protocol (one pipe each way per worker, text lines):

* controller -> worker: ``"i j\\n"`` run cases ``i .. j-1`` of the shared list;
  ``"q\\n"`` quit;
* worker -> controller: ``"S i\\n"`` starting case i, ``"R <json>\\n"`` its result,
  ``"D\\n"`` the batch is done (send more).

Each worker runs with one intra-op thread (no oversubscription) in a process
group of its own (a Ctrl-C in the terminal reaches only the controller, which
stops the workers; whatever a case forked dies with its worker's group). A worker
that dies mid-case (segfault, ``os._exit``, the native-hang watchdog) makes that
case ``crash`` or ``timeout``; a fresh worker is forked and the run goes on.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import selectors
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.core.results import CaseResult
from harness.core.signals import deferred_signals

#: Runs case ``i`` in a worker and returns its record (never raises for a Function's fault).
RunOne = Callable[[int], CaseResult]
#: The record of case ``i`` whose worker died (``faults``: the fault handler's text).
OnDeath = Callable[[int, str], CaseResult]
#: The record of case ``i`` that could not run at all (``why``: one phrase).
NotRun = Callable[[int, str], CaseResult]
#: Told of each record as it arrives (case index, record); may raise to end the run
#: (``RunStopped``): the workers are stopped as on Ctrl-C.
OnRecord = Callable[[int, CaseResult], None]
#: The record of case ``i`` when it need not run (its check timed out twice), else None.
Skip = Callable[[int], CaseResult | None]

#: Workers that may die in a row without finishing a case before the rest is given up.
FRUITLESS_LIMIT = 3


def watchdog_grace(limit: float) -> float:
    """Extra seconds past a case's limit before its worker is killed (SIGALRM gets the first go)."""
    return min(30.0, max(2.0, limit))


def available() -> bool:
    """Forking is safe here: a POSIX fork, and no CUDA context (a forked CUDA context is unusable)."""
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return False
    try:
        import torch

        return not torch.cuda.is_initialized()
    except Exception:
        return False


def exit_signal(pid: int, wait_s: float = 0.5) -> str:
    """The faults line naming the signal that ended child ``pid`` (reaped here), waiting up to
    ``wait_s`` for it to end; '' when it is still running, exited, or was reaped already."""
    from harness.engine.records import signal_line

    deadline = time.monotonic() + wait_s
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return ""
        if done:
            return signal_line(status)
        if time.monotonic() > deadline:
            return ""
        time.sleep(0.01)


@dataclass
class _Worker:
    pid: int
    to_worker: int  # write end
    from_worker: int  # read end
    faults_path: str
    buffer: bytes = b""
    home: int = 0  # the region of cases it works through (see ForkPool._send)
    batch: list[int] = field(default_factory=list)  # cases sent, not yet reported
    current: int | None = None
    started: float = 0.0


def _regions(count: int, workers: int) -> list[list[int]]:
    """Cases ``0 .. count-1`` cut into one contiguous region per worker."""
    bounds = [count * k // workers for k in range(workers + 1)]
    return [list(range(bounds[k], bounds[k + 1])) for k in range(workers)]


def _take_run(region: list[int], n: int, *, from_back: bool) -> list[int]:
    """Remove and return up to ``n`` consecutive cases (ascending) from the front or the
    back of ``region``: one message names a batch by its first and its end."""
    step = -1 if from_back else 1
    edge = len(region) - 1 if from_back else 0
    run = 1
    while run < n and run < len(region) and region[edge + step * run] == region[edge] + step * run:
        run += 1
    if from_back:
        batch = region[-run:]
        del region[-run:]
    else:
        batch = region[:run]
        del region[:run]
    return batch


def _batch_size(remaining: int, workers: int) -> int:
    """Cases per message: big batches early (few round trips), single cases at the end (balance)."""
    return max(1, min(16, remaining // (4 * workers)))


def _worker_main(
    run_one: RunOne,
    commands: int,
    results: int,
    faults_path: str,
    watchdog_s: float | None,
    watchdog_slack_s: float = 0.0,
) -> None:
    """The body of a forked worker: run the batches it is sent, report each case.

    The watchdog (``faulthandler.dump_traceback_later``) starts a thread each time it is
    armed and waits for it to end when cancelled, which under a busy machine is
    milliseconds per case. So it is armed again only when the case about to start is more
    than ``watchdog_slack_s`` past the last arming (a case then still gets at least
    ``watchdog_s - watchdog_slack_s`` before it fires), and cancelled once per batch."""
    import faulthandler

    import torch

    os.setpgid(0, 0)
    from harness.engine.children import become_subreaper

    become_subreaper()  # a case's orphaned grandchildren come back here, to be killed
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the controller decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    torch.set_num_threads(1)  # (case_state forgets the controller's last case at the fork)
    faults = open(faults_path, "w")  # noqa: SIM115 (the process ends with os._exit)
    faulthandler.enable(file=faults, all_threads=False)
    out = os.fdopen(results, "wb")  # buffered: a long line is written whole, flushed per line
    inp = os.fdopen(commands, "rb")

    def send(line: bytes) -> None:
        out.write(line)
        out.flush()

    armed_at: float | None = None
    for line in inp:
        text = line.decode().strip()
        if text == "q" or not text:
            break
        first, last = (int(v) for v in text.split())
        for i in range(first, last):
            send(f"S {i}\n".encode())
            if watchdog_s:
                now = time.monotonic()
                if armed_at is None or now - armed_at > watchdog_slack_s:
                    faulthandler.dump_traceback_later(watchdog_s, exit=True, file=faults)
                    armed_at = now
            record = run_one(i)
            send(b"R " + json.dumps(record.to_dict()).encode() + b"\n")
        if armed_at is not None:  # waiting for the next batch is no case's time
            faulthandler.cancel_dump_traceback_later()
            armed_at = None
        send(b"D\n")


class ForkPool:
    """Run ``count`` cases in ``workers`` forked processes; results by case index."""

    def __init__(
        self,
        count: int,
        workers: int,
        run_one: RunOne,
        on_death: OnDeath,
        not_run: NotRun,
        *,
        watchdog_s: float | None = None,
        backstop_s: float | None = None,
        on_record: OnRecord | None = None,
        skip: Skip | None = None,
        prepare: Callable[[str], None] | None = None,
        watchdog_slack_s: float = 0.0,
    ) -> None:
        self.count = count
        self.on_record = on_record
        self.skip = skip
        self.prepare = prepare  # called with the temporary folder before the first fork
        self.workers = max(1, min(workers, count))
        self.run_one = run_one
        self.on_death = on_death
        self.not_run = not_run
        self.fruitless = 0  # workers in a row that died outside any case
        self.watchdog_s = watchdog_s
        self.watchdog_slack_s = watchdog_slack_s  # see ``_worker_main``
        self.backstop_s = backstop_s  # the controller kills a worker silent past this
        #: Cases not yet sent: one contiguous region per worker (see ``_send``).
        self.regions = _regions(count, self.workers)
        self.done: dict[int, CaseResult] = {}
        self.live: dict[int, _Worker] = {}  # by read fd
        self.folder = ""  # made by run(), removed when it ends however it ends
        self.selector = selectors.DefaultSelector()

    # --- workers ---------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """How many cases are not yet sent."""
        return sum(len(r) for r in self.regions)

    def _fullest(self) -> int:
        return max(range(len(self.regions)), key=lambda k: len(self.regions[k]))

    def _spawn(self, home: int | None = None) -> _Worker:
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        faults_path = os.path.join(
            self.folder, f"faults-{len(self.done)}-{time.monotonic_ns()}.txt"
        )
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        # A signal between the fork and the worker's record would leave a worker no one stops.
        with deferred_signals():
            worker = self._fork(cmd_r, cmd_w, res_r, res_w, faults_path, home)
        return worker

    def _fork(
        self, cmd_r: int, cmd_w: int, res_r: int, res_w: int, faults_path: str, home: int | None
    ) -> _Worker:
        # What exists now is the worker's inheritance: frozen, the worker's garbage collector
        # never walks it, so its pages stay shared instead of being copied on first touch.
        gc.freeze()
        pid = os.fork()
        if pid != 0:
            gc.unfreeze()
        if pid == 0:  # the worker: never returns into the controller's code
            code = 0
            try:
                os.close(cmd_w)
                os.close(res_r)
                for w in self.live.values():
                    os.close(w.to_worker)
                    os.close(w.from_worker)
                _worker_main(
                    self.run_one,
                    cmd_r,
                    res_w,
                    faults_path,
                    self.watchdog_s,
                    self.watchdog_slack_s,
                )
            except BaseException:
                code = 70
            finally:
                os._exit(code)
        os.close(cmd_r)
        os.close(res_w)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also done by the worker; whichever runs first
        worker = _Worker(
            pid, cmd_w, res_r, faults_path, home=self._fullest() if home is None else home
        )
        self.live[res_r] = worker
        self.selector.register(res_r, selectors.EVENT_READ, worker)
        return worker

    def _start(self, home: int | None = None) -> None:
        """A fresh worker with its first batch (none when every case left was skipped)."""
        worker = self._spawn(home)
        if not self._send(worker):
            self._retire(worker, kill=False)

    def _send(self, worker: _Worker) -> bool:
        """Give ``worker`` its next batch (consecutive cases); False when nothing is left.

        A worker works through its own region from the front, so it stays with few
        entries and their samples, slices and references, which it draws once (two
        workers taking turns through one list both drew nearly every entry's). Once
        its region is done it takes from the back of the fullest one, whose owner
        goes on at the front.
        """
        while True:
            remaining = self.pending
            if not remaining:
                return False
            n = _batch_size(remaining, self.workers)
            own = self.regions[worker.home]
            region = own if own else self.regions[self._fullest()]
            batch = _take_run(region, n, from_back=not own)
            kept = self._not_skipped(batch)
            if not kept:
                continue
            run = 1  # the first consecutive run goes; the rest back where it came from
            while run < len(kept) and kept[run] == kept[0] + run:
                run += 1
            if own:
                region[:0] = kept[run:]
            else:
                region.extend(kept[run:])
            worker.batch = kept[:run]
            break
        first, end = worker.batch[0], worker.batch[-1] + 1
        with contextlib.suppress(OSError):  # a dead worker: its end of file says so next
            os.write(worker.to_worker, f"{first} {end}\n".encode())
        return True

    def _not_skipped(self, batch: list[int]) -> list[int]:
        """``batch`` less the cases ``skip`` gives a record for (recorded here, not run)."""
        if self.skip is None:
            return batch
        kept = []
        for i in batch:
            record = self.skip(i)
            if record is None:
                kept.append(i)
            else:
                self.done[i] = record
        return kept

    def _retire(self, worker: _Worker, *, kill: bool) -> None:
        self.selector.unregister(worker.from_worker)
        del self.live[worker.from_worker]
        if kill:
            with contextlib.suppress(OSError):
                os.killpg(worker.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.kill(worker.pid, signal.SIGKILL)
        else:
            with contextlib.suppress(OSError):
                os.write(worker.to_worker, b"q\n")
        for fd in (worker.to_worker, worker.from_worker):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(worker.pid, 0)
        if kill:  # whatever the cases forked and left in the worker's group
            with contextlib.suppress(OSError):
                os.killpg(worker.pid, signal.SIGKILL)

    def _died(self, worker: _Worker, faults: str = "") -> None:
        """``worker`` ended mid-batch: its current case gets a record, the rest go back."""
        ended = "" if faults else exit_signal(worker.pid)
        self._retire(worker, kill=True)
        if not faults:
            with contextlib.suppress(OSError), open(worker.faults_path, errors="replace") as f:
                faults = f.read()
            faults += ended
        rest = [i for i in worker.batch if i not in self.done]
        dead = None
        if worker.current is not None and worker.current not in self.done:
            dead = worker.current
            self.done[dead] = self.on_death(dead, faults)
            rest = [i for i in rest if i != dead]
            self.fruitless = 0
        else:
            self.fruitless += 1
        self.regions[worker.home][:0] = rest
        if dead is not None:
            self._told(dead)
        if self.fruitless >= FRUITLESS_LIMIT:  # workers die before any case: give up, say why
            why = f"not run: {self.fruitless} worker processes in a row died between cases"
            for region in self.regions:
                for i in region:
                    self.done[i] = self.not_run(i, why)
                region.clear()

    def _handle(self, worker: _Worker, line: bytes) -> None:
        if line.startswith(b"S "):
            worker.current = int(line[2:])
            worker.started = time.monotonic()
        elif line.startswith(b"R "):
            record = CaseResult.from_dict(json.loads(line[2:]))
            assert worker.current is not None
            index = worker.current
            self.done[index] = record
            worker.current = None
            self.fruitless = 0
            self._told(index)
        elif line == b"D" and not self._send(worker):
            self._retire(worker, kill=False)

    def _told(self, index: int) -> None:
        if self.on_record is not None:
            self.on_record(index, self.done[index])

    # --- the run -----------------------------------------------------------------------

    def run(self) -> dict[int, CaseResult]:
        """Every case's record by index. On KeyboardInterrupt the workers are stopped and the
        records finished so far stay in ``self.done``; the interrupt is raised again."""
        try:
            with deferred_signals():  # the folder is this run's once made: removed below
                self.folder = tempfile.mkdtemp(prefix="afdb-run-")
            if self.prepare is not None:
                self.prepare(self.folder)
            for home in range(self.workers):
                if self.regions[home]:
                    self._start(home)
            while self.live:
                for key, _ in self.selector.select(timeout=1.0):
                    worker: _Worker = key.data
                    try:
                        chunk = os.read(worker.from_worker, 1 << 16)
                    except OSError:
                        chunk = b""
                    if not chunk:
                        self._died(worker)
                        if self.pending:
                            self._start(worker.home)
                        continue
                    worker.buffer += chunk
                    while b"\n" in worker.buffer and worker.from_worker in self.live:
                        line, _, worker.buffer = worker.buffer.partition(b"\n")
                        self._handle(worker, line)
                self._enforce_backstop()
                if not self.live and self.pending:
                    self._start()
            return self.done
        finally:
            with deferred_signals():  # a second Ctrl-C waits until the workers are stopped
                for worker in list(self.live.values()):
                    self._retire(worker, kill=True)
                self.selector.close()
                if self.folder:
                    import shutil

                    shutil.rmtree(self.folder, ignore_errors=True)

    def _enforce_backstop(self) -> None:
        if not self.backstop_s:
            return
        now = time.monotonic()
        for worker in list(self.live.values()):
            if worker.current is not None and now - worker.started > self.backstop_s:
                self._died(worker, faults="Timeout (controller backstop)")
                if self.pending:
                    self._start(worker.home)


def run_forked(
    count: int,
    workers: int,
    run_one: RunOne,
    on_death: OnDeath,
    not_run: NotRun,
    *,
    watchdog_s: float | None = None,
    watchdog_slack_s: float = 0.0,
    collect: dict[int, CaseResult] | None = None,
    on_record: OnRecord | None = None,
    skip: Skip | None = None,
    prepare: Callable[[str], None] | None = None,
) -> dict[int, CaseResult]:
    """Run cases ``0 .. count-1`` in forked workers (see the module docstring).

    ``skip``: consulted before a case is sent; ``prepare``: called with the pool's
    temporary folder before the first worker is forked (files the workers share).
    """
    pool = ForkPool(
        count,
        workers,
        run_one,
        on_death,
        not_run,
        watchdog_s=watchdog_s,
        backstop_s=(watchdog_s + 30.0) if watchdog_s else None,
        on_record=on_record,
        skip=skip,
        prepare=prepare,
        watchdog_slack_s=watchdog_slack_s,
    )
    try:
        return pool.run()
    finally:
        if collect is not None:
            collect.update(pool.done)


__all__ = ["ForkPool", "available", "run_forked"]
